//! Parsing of the attribute arguments: `#[service(...)]` on the trait and `#[call(...)]` on its
//! functions. Values are checked here (durations, versions, requirements) because that is where
//! their tokens are, so errors point at the literal the user wrote.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Attribute, Meta, Path};

use crate::errors::Errors;
use crate::options::{Options, Seen, key_name, skip_value, string, unknown_key};

const SERVICE_KEYS: &str = "name, version, compat, timeout, retry, hedge, wait_for_provider, crate";
const CALL_KEYS: &str = "idempotent, at_most_once, timeout, retry, hedge, wait_for_provider";

/// What `#[service(...)]` said. Missing or invalid values are `None`; their errors are reported.
#[derive(Default)]
pub(crate) struct ServiceArgs {
    pub(crate) name: Option<String>,
    pub(crate) version: Option<semver::Version>,
    /// The requirement as written (it parsed as a `semver::VersionReq`).
    pub(crate) compat: Option<String>,
    pub(crate) options: Options,
    /// `crate = "path"`: where the runtime is, when it is not `::cluster`.
    pub(crate) krate: Option<Path>,
}

/// What one `#[call(...)]` said.
#[derive(Default)]
pub(crate) struct CallArgs {
    pub(crate) idempotent: bool,
    pub(crate) at_most_once: bool,
    /// Where each flag was written, for errors about the pair.
    pub(crate) flag_spans: Vec<Span>,
    pub(crate) options: Options,
}

/// Parses the tokens inside `#[service(...)]`.
pub(crate) fn parse_service(tokens: TokenStream, errors: &mut Errors) -> ServiceArgs {
    let mut args = ServiceArgs::default();
    let mut seen = Seen::new("#[service]");
    let parser = syn::meta::parser(|meta| args.parse_key(&meta, &mut seen, errors));
    if let Err(error) = parser.parse2(tokens) {
        // The parse stopped part-way: "missing key" errors would only be noise now.
        errors.push(error);
        return args;
    }
    for (key, example) in [
        ("name", "name = \"search\""),
        ("version", "version = \"1.0.0\""),
    ] {
        if !seen.contains(key) {
            errors.at(
                Span::call_site(),
                format!("missing `{key}` in #[service]: every service needs one, e.g. {example}"),
            );
        }
    }
    args
}

impl ServiceArgs {
    fn parse_key(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        seen: &mut Seen,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let key = key_name(meta);
        if self.options.parse_key(&key, meta, seen, errors)? {
            return Ok(());
        }
        if !matches!(key.as_str(), "name" | "version" | "compat" | "crate") {
            return unknown_key(meta, &key, "#[service]", SERVICE_KEYS, errors);
        }
        let fresh = seen.first(&key, meta.path.span(), errors);
        let example = match key.as_str() {
            "name" => "name = \"search\"",
            "version" => "version = \"1.0.0\"",
            "compat" => "compat = \"^1.2\"",
            _ => "crate = \"my_cluster\"",
        };
        let Some(lit) = string(meta, &key, example, errors)? else {
            return Ok(());
        };
        if !fresh {
            return Ok(());
        }
        let text = lit.value();
        match key.as_str() {
            "name" if text.trim().is_empty() => {
                errors.spanned(&lit, "`name` must not be empty, e.g. name = \"search\"");
            }
            "name" => self.name = Some(text),
            "version" => match semver::Version::parse(&text) {
                Ok(version) => self.version = Some(version),
                Err(error) => errors.spanned(
                    &lit,
                    format!(
                        "invalid version {text:?}: {error}; expected a semantic version such as \"2.1.0\""
                    ),
                ),
            },
            "compat" => match semver::VersionReq::parse(&text) {
                Ok(_) => self.compat = Some(text),
                Err(error) => errors.spanned(
                    &lit,
                    format!(
                        "invalid compat requirement {text:?}: {error}; expected a semver requirement such as \"^2.1\" or \">=2.0, <4\""
                    ),
                ),
            },
            _ => match lit.parse::<Path>() {
                Ok(path) => self.krate = Some(path),
                Err(_) => errors.spanned(
                    &lit,
                    format!(
                        "invalid `crate` path {text:?}: expected a path to the cluster crate such as \"my_cluster\" or \"::my::cluster\""
                    ),
                ),
            },
        }
        Ok(())
    }
}

/// Whether `attr` is a `#[call]` attribute (which this macro consumes).
pub(crate) fn is_call(attr: &Attribute) -> bool {
    attr.path().is_ident("call")
}

/// Parses one `#[call]` / `#[call(...)]` attribute.
pub(crate) fn parse_call(attr: &Attribute, errors: &mut Errors) -> CallArgs {
    let mut args = CallArgs::default();
    match &attr.meta {
        Meta::Path(_) => {}
        Meta::List(_) => {
            let mut seen = Seen::new("#[call]");
            if let Err(error) =
                attr.parse_nested_meta(|meta| args.parse_key(&meta, &mut seen, errors))
            {
                errors.push(error);
            }
        }
        Meta::NameValue(meta) => errors.spanned(
            meta,
            "expected #[call] or #[call(idempotent, timeout = \"…\", retry(...), hedge(...))]",
        ),
    }
    args
}

impl CallArgs {
    fn parse_key(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        seen: &mut Seen,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let key = key_name(meta);
        if self.options.parse_key(&key, meta, seen, errors)? {
            return Ok(());
        }
        if key != "idempotent" && key != "at_most_once" {
            return unknown_key(meta, &key, "#[call]", CALL_KEYS, errors);
        }
        if seen.first(&key, meta.path.span(), errors) {
            match key.as_str() {
                "idempotent" => self.idempotent = true,
                _ => self.at_most_once = true,
            }
            self.flag_spans.push(meta.path.span());
        }
        if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
            errors.spanned(
                &meta.path,
                format!("`{key}` is a flag and takes no value: write #[call({key})]"),
            );
            skip_value(meta)?;
        }
        if self.idempotent && self.at_most_once && self.flag_spans.len() == 2 {
            errors.at(
                self.flag_spans[1],
                "a function is `idempotent` (retried anywhere, hedged) or `at_most_once` (retried only on the node it may have run on, which answers from its record), not both",
            );
        }
        Ok(())
    }
}
