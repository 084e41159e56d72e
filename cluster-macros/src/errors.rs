//! An accumulator for the errors of one macro invocation.
//!
//! Every check pushes here instead of returning early, so a user who made three mistakes
//! sees three errors in one build rather than fixing them one compile at a time.

use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// All errors found so far, already merged with [`syn::Error::combine`].
#[derive(Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    /// Records an error produced elsewhere (for example a syn parse error).
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    /// Records an error pointing at `span`.
    pub(crate) fn at(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Records an error pointing at all of `tokens`.
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Whether anything was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.combined.is_none()
    }

    /// The combined error, if any was recorded.
    pub(crate) fn into_error(self) -> Option<syn::Error> {
        self.combined
    }
}
