//! The call options shared by `#[service(...)]` and `#[call(...)]`: `timeout`, `retry`,
//! `hedge` and `wait_for_provider`,
//! plus the small value readers every key uses.
//!
//! Readers report a wrong value to [`Errors`] and return `Ok(None)`, so the parse goes on and the
//! next key's mistakes are found in the same build. Only token-level syntax errors (which leave
//! the parse position unknown) come back as `Err`.

use proc_macro2::Span;
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr, Token, token};

use crate::duration::{DURATION_HELP, DurationError, parse_millis};
use crate::errors::Errors;

/// The most hedges of one call (the runtime's `cluster::options::MAX_HEDGES`).
const MAX_HEDGES: u32 = 8;

/// Options given at one level (the service or one function); `None` means "not given here".
#[derive(Default)]
pub(crate) struct Options {
    /// `timeout = "dur"`, in milliseconds.
    pub(crate) timeout: Option<u64>,
    /// `retry = bool` or `retry(...)`.
    pub(crate) retry: Option<Retry>,
    /// `wait_for_provider = "dur"`, in milliseconds: how long a call that finds no provider
    /// waits for one (read from the client's own build while no provider is known).
    pub(crate) wait_for_provider: Option<u64>,
    /// `hedge(after = "dur", max = N)`.
    pub(crate) hedge: Option<Hedge>,
    /// Where `hedge` was written, for errors about it.
    pub(crate) hedge_span: Option<Span>,
    /// Which form of `retry` was seen first (`true` = the list form), to refuse mixing them.
    retry_form: Option<bool>,
}

/// `hedge(after = "dur", max = N)`: both required.
pub(crate) struct Hedge {
    /// In milliseconds.
    pub(crate) after: u64,
    pub(crate) max: u32,
}

/// The two spellings of `retry`.
pub(crate) enum Retry {
    /// `retry = true` / `retry = false`.
    Enabled(bool),
    /// `retry(...)`: retries on, with these settings.
    Settings(RetrySettings),
}

/// The sub-keys of `retry(...)`, each optional.
#[derive(Default)]
pub(crate) struct RetrySettings {
    pub(crate) after: Option<u64>,
    pub(crate) budget: Option<u64>,
    pub(crate) max_after: Option<u64>,
    pub(crate) factor: Option<f64>,
    pub(crate) jitter: Option<bool>,
    /// `overloaded = N`: how often an `Overloaded` refusal is sent again.
    pub(crate) overloaded: Option<u32>,
    /// Retry throttling: `ratio = 0.2`, `window = "10s"`, `floor = 10`.
    pub(crate) ratio: Option<f64>,
    pub(crate) window: Option<u64>,
    pub(crate) floor: Option<u32>,
}

const RETRY_KEYS: &str =
    "after, budget, max_after, factor, jitter, overloaded, ratio, window, floor";

impl Options {
    /// Parses `timeout`, `retry` or `wait_for_provider`; returns `Ok(false)` for any other key so the caller can
    /// try its own keys.
    pub(crate) fn parse_key(
        &mut self,
        key: &str,
        meta: &ParseNestedMeta<'_>,
        seen: &mut Seen,
        errors: &mut Errors,
    ) -> syn::Result<bool> {
        match key {
            "timeout" => {
                let fresh = seen.first(key, meta.path.span(), errors);
                let value = duration(meta, key, true, errors)?;
                if fresh {
                    self.timeout = value;
                }
            }
            "retry" => self.parse_retry(meta, seen, errors)?,
            "hedge" => self.parse_hedge(meta, seen, errors)?,
            "wait_for_provider" => {
                let fresh = seen.first(key, meta.path.span(), errors);
                let value = duration(meta, key, false, errors)?;
                if fresh {
                    self.wait_for_provider = value;
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn parse_hedge(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        seen: &mut Seen,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let span = meta.path.span();
        let fresh = seen.first("hedge", span, errors);
        if !meta.input.peek(token::Paren) {
            errors.at(
                span,
                "`hedge` needs its settings: hedge(after = \"50ms\", max = 1)",
            );
            return skip_value(meta);
        }
        let (mut after, mut max) = (None, None);
        let mut inner_seen = Seen::new("hedge(...)");
        meta.parse_nested_meta(|inner| {
            let key = key_name(&inner);
            let first = inner_seen.first(&key, inner.path.span(), errors);
            match key.as_str() {
                // Durations are whole milliseconds: below 1 ms is 0, which would send every
                // copy at once (the runtime takes it as 1 ms: `MIN_HEDGE_AFTER`).
                "after" => match duration(&inner, &key, false, errors)? {
                    Some(0) => errors.at(
                        inner.path.span(),
                        "`after` is how long an attempt goes unanswered before a copy is sent: at least 1ms, e.g. after = \"50ms\"",
                    ),
                    millis => store(first, &mut after, millis),
                },
                "max" => match count(&inner, &key, errors)? {
                    Some(n) if n == 0 || n > MAX_HEDGES => errors.at(
                        inner.path.span(),
                        format!("`max` is the most copies sent besides the first: from 1 to {MAX_HEDGES}"),
                    ),
                    n => store(first, &mut max, n),
                },
                _ => unknown_key(&inner, &key, "hedge(...)", "after, max", errors)?,
            }
            Ok(())
        })?;
        for (key, example, given) in [
            ("after", "after = \"50ms\"", after.is_some()),
            ("max", "max = 1", max.is_some()),
        ] {
            if !given && !inner_seen.contains(key) {
                errors.at(span, format!("hedge(...) needs `{key}`, e.g. {example}"));
            }
        }
        if fresh && let (Some(after), Some(max)) = (after, max) {
            self.hedge = Some(Hedge { after, max });
            self.hedge_span = Some(span);
        }
        Ok(())
    }

    fn parse_retry(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        seen: &mut Seen,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let span = meta.path.span();
        let is_list = meta.input.peek(token::Paren);
        if !is_list && !meta.input.peek(Token![=]) {
            errors.at(
                span,
                "`retry` needs a value: retry = true, retry = false or retry(after = \"…\", …)",
            );
            return Ok(());
        }
        let fresh = match self.retry_form {
            None => {
                self.retry_form = Some(is_list);
                seen.first("retry", span, errors)
            }
            Some(was_list) if was_list != is_list => {
                errors.at(
                    span,
                    format!(
                        "conflicting `retry` keys in {}: use either retry(...) (retries on, with \
                         settings) or retry = true/false, not both",
                        seen.attribute
                    ),
                );
                false
            }
            Some(_) => seen.first("retry", span, errors),
        };
        let retry = if is_list {
            let mut settings = RetrySettings::default();
            let mut inner_seen = Seen::new("retry(...)");
            meta.parse_nested_meta(|inner| settings.parse_key(&inner, &mut inner_seen, errors))?;
            Some(Retry::Settings(settings))
        } else {
            boolean(meta, "retry", "retry = false", errors)?.map(Retry::Enabled)
        };
        if fresh {
            self.retry = retry;
        }
        Ok(())
    }
}

impl RetrySettings {
    fn parse_key(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        seen: &mut Seen,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let key = key_name(meta);
        let fresh = seen.first(&key, meta.path.span(), errors);
        match key.as_str() {
            "after" => store(fresh, &mut self.after, duration(meta, &key, false, errors)?),
            "budget" => store(fresh, &mut self.budget, duration(meta, &key, true, errors)?),
            "max_after" => store(
                fresh,
                &mut self.max_after,
                duration(meta, &key, false, errors)?,
            ),
            "factor" => store(fresh, &mut self.factor, factor(meta, errors)?),
            "jitter" => store(
                fresh,
                &mut self.jitter,
                boolean(meta, "jitter", "jitter = true", errors)?,
            ),
            "overloaded" => store(fresh, &mut self.overloaded, count(meta, &key, errors)?),
            "ratio" => store(fresh, &mut self.ratio, ratio(meta, errors)?),
            "window" => match duration(meta, &key, true, errors)? {
                Some(millis) if !(1_000..=60_000).contains(&millis) => errors.at(
                    meta.path.span(),
                    "`window` is what retry throttling counts over: from 1s to 60s, e.g. window = \"10s\"",
                ),
                millis => store(fresh, &mut self.window, millis),
            },
            "floor" => store(fresh, &mut self.floor, count(meta, &key, errors)?),
            _ => unknown_key(meta, &key, "retry(...)", RETRY_KEYS, errors)?,
        }
        Ok(())
    }
}

/// Keeps only the first occurrence of a key; later ones were already reported as duplicates.
fn store<T>(fresh: bool, slot: &mut Option<T>, value: Option<T>) {
    if fresh {
        *slot = value;
    }
}

/// The keys of one attribute seen so far, to refuse duplicates.
pub(crate) struct Seen {
    /// How the attribute is named in messages: `#[service]`, `#[call]`, `retry(...)`.
    pub(crate) attribute: &'static str,
    keys: Vec<String>,
}

impl Seen {
    pub(crate) fn new(attribute: &'static str) -> Self {
        Self {
            attribute,
            keys: Vec::new(),
        }
    }

    /// Whether `key` was given.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.keys.iter().any(|seen| seen == key)
    }

    /// Records `key`; if it was already given, reports the duplicate at `span` and returns false.
    pub(crate) fn first(&mut self, key: &str, span: Span, errors: &mut Errors) -> bool {
        if self.contains(key) {
            errors.at(
                span,
                format!(
                    "duplicate key `{key}` in {}: each key may be given once",
                    self.attribute
                ),
            );
            return false;
        }
        self.keys.push(key.to_owned());
        true
    }
}

/// The key as written (`timeout`, `crate`, or `a::b` for a path, which is never a known key).
pub(crate) fn key_name(meta: &ParseNestedMeta<'_>) -> String {
    let segments: Vec<String> = meta
        .path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect();
    segments.join("::")
}

/// Reports an unknown key and skips its value so the keys after it are still checked.
pub(crate) fn unknown_key(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    attribute: &str,
    known: &str,
    errors: &mut Errors,
) -> syn::Result<()> {
    errors.spanned(
        &meta.path,
        format!("unknown key `{key}` in {attribute}: expected one of {known}"),
    );
    skip_value(meta)
}

/// Consumes `= expr` or `(...)` after a key, whatever is inside.
pub(crate) fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        content.parse::<proc_macro2::TokenStream>()?;
    }
    Ok(())
}

/// The expression after `key =`, or an error if the key was written without a value.
fn value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Expr>> {
    if !meta.input.peek(Token![=]) {
        errors.spanned(&meta.path, format!("`{key}` needs a value, e.g. {example}"));
        skip_value(meta)?;
        return Ok(None);
    }
    Ok(Some(meta.value()?.parse::<Expr>()?))
}

/// The string literal after `key =`.
pub(crate) fn string(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
    errors: &mut Errors,
) -> syn::Result<Option<LitStr>> {
    Ok(match value(meta, key, example, errors)? {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        })) => Some(lit),
        Some(other) => {
            errors.spanned(
                &other,
                format!("`{key}` expects a string literal, e.g. {example}"),
            );
            None
        }
        None => None,
    })
}

/// The bool literal after `key =`.
fn boolean(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
    errors: &mut Errors,
) -> syn::Result<Option<bool>> {
    Ok(match value(meta, key, example, errors)? {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            ..
        })) => Some(lit.value),
        Some(other) => {
            errors.spanned(
                &other,
                format!("`{key}` expects `true` or `false`, e.g. {example}"),
            );
            None
        }
        None => None,
    })
}

/// A duration string after `key =`, in milliseconds; `nonzero` refuses "0s" and friends.
fn duration(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    nonzero: bool,
    errors: &mut Errors,
) -> syn::Result<Option<u64>> {
    let example = format!("{key} = \"5s\"");
    let Some(lit) = string(meta, key, &example, errors)? else {
        return Ok(None);
    };
    let text = lit.value();
    Ok(match parse_millis(&text) {
        Ok(0) if nonzero => {
            errors.spanned(
                &lit,
                format!("`{key}` must be greater than zero, e.g. {example}"),
            );
            None
        }
        Ok(millis) => Some(millis),
        Err(DurationError::Malformed) => {
            errors.spanned(
                &lit,
                format!("invalid duration {text:?} for `{key}`: {DURATION_HELP}"),
            );
            None
        }
        Err(DurationError::TooLarge) => {
            errors.spanned(
                &lit,
                format!(
                    "duration {text:?} for `{key}` is too large: it must fit in u64 milliseconds"
                ),
            );
            None
        }
    })
}

/// A count: an integer literal from 0 to `u32::MAX`.
fn count(meta: &ParseNestedMeta<'_>, key: &str, errors: &mut Errors) -> syn::Result<Option<u32>> {
    let example = format!("{key} = 3");
    let Some(expr) = value(meta, key, &example, errors)? else {
        return Ok(None);
    };
    let parsed = match &expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => lit.base10_parse::<u32>().ok(),
        _ => None,
    };
    if parsed.is_none() {
        errors.spanned(
            &expr,
            format!(
                "invalid `{key}` `{}`: expected a whole number from 0 to {}, e.g. {example}",
                expr.to_token_stream(),
                u32::MAX
            ),
        );
    }
    Ok(parsed)
}

/// Retry throttling's ratio: a float or integer literal from 0 to 10.
fn ratio(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Option<f64>> {
    let Some(expr) = value(meta, "ratio", "ratio = 0.2", errors)? else {
        return Ok(None);
    };
    Ok(match number(&expr) {
        Some(ratio) if ratio.is_finite() && (0.0..=10.0).contains(&ratio) => Some(ratio),
        _ => {
            errors.spanned(
                &expr,
                format!(
                    "invalid `ratio` `{}`: the share of calls retries may add, a number from 0 to 10, e.g. ratio = 0.2",
                    expr.to_token_stream().to_string().replace(' ', "")
                ),
            );
            None
        }
    })
}

/// A float or integer literal.
fn number(expr: &Expr) -> Option<f64> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Float(lit),
            ..
        }) => lit.base10_parse::<f64>().ok(),
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => lit.base10_parse::<f64>().ok(),
        _ => None,
    }
}

/// The backoff factor: a float or integer literal, at least 1.0.
fn factor(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Option<f64>> {
    let Some(expr) = value(meta, "factor", "factor = 2.0", errors)? else {
        return Ok(None);
    };
    Ok(match number(&expr) {
        Some(factor) if factor.is_finite() && factor >= 1.0 => Some(factor),
        _ => {
            errors.spanned(
                &expr,
                format!(
                    "invalid `factor` `{}`: expected a number literal >= 1.0, e.g. factor = 2.0",
                    expr.to_token_stream()
                ),
            );
            None
        }
    })
}
