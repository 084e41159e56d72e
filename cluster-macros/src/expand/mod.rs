//! From the attribute and the trait to the emitted code: the rewritten trait, the client, the
//! server adapter; or, when anything is wrong, the user's trait and the errors.

mod client;
mod description;
mod server;

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::ext::IdentExt;
use syn::{FnArg, Item, ItemTrait, ReturnType, TraitItem};

use crate::attr;
use crate::errors::Errors;
use crate::model::{Service, strip_call_attrs};
use crate::validate::is_plain_binding;

/// The whole `#[service]` expansion.
pub(crate) fn service(args: TokenStream, input: TokenStream) -> TokenStream {
    let item = match syn::parse2::<Item>(input.clone()) {
        Ok(Item::Trait(item)) => item,
        Ok(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                "#[service] can only be applied to a trait",
            );
            return fallback_tokens(input, error);
        }
        Err(error) => return fallback_tokens(input, error),
    };
    let mut errors = Errors::default();
    let args = attr::parse_service(args, &mut errors);
    match Service::new(args, &item, &mut errors) {
        Some(service) if errors.is_empty() => expand(&service),
        _ => fallback(item, errors),
    }
}

fn expand(service: &Service) -> TokenStream {
    let item = rewrite_trait(service);
    let client = client::expand(service);
    let server = server::expand(service);
    quote! {
        #item
        #client
        #server
    }
}

/// The user's trait with every `async fn` turned into `fn … -> impl Future<Output = R> + Send`,
/// so a provider's futures can be spawned, and with `Send + Sync + 'static` supertraits so a
/// provider can be shared between tasks.
fn rewrite_trait(service: &Service) -> ItemTrait {
    let mut item = service.item.clone();
    item.supertraits
        .push(syn::parse_quote!(::core::marker::Send));
    item.supertraits
        .push(syn::parse_quote!(::core::marker::Sync));
    item.supertraits.push(syn::parse_quote!('static));
    if item.colon_token.is_none() {
        item.colon_token = Some(Default::default());
    }
    let functions = item.items.iter_mut().filter_map(|item| match item {
        TraitItem::Fn(function) => Some(function),
        _ => None,
    });
    for (function, method) in functions.zip(&service.methods) {
        let output = &method.output;
        function.sig.asyncness = None;
        function.sig.output = ReturnType::Type(
            Default::default(),
            Box::new(syn::parse_quote! {
                impl ::core::future::Future<Output = #output> + ::core::marker::Send
            }),
        );
    }
    item
}

/// What a failed expansion emits: the user's trait, untouched but for `#[call]`, so code that
/// implements or names it does not add errors of its own, followed by every error found.
fn fallback(item: ItemTrait, errors: Errors) -> TokenStream {
    let mut item = without_repeated_errors(strip_call_attrs(item));
    // The trait keeps its `async fn`s; the lint about them in public traits would only be noise
    // next to the real errors.
    item.attrs
        .push(syn::parse_quote!(#[allow(async_fn_in_trait)]));
    let errors = errors.into_error().map(|error| error.to_compile_error());
    quote! {
        #item
        #errors
    }
}

/// Removes what rustc would report a second time after our own error: a repeated function name
/// (E0428) and patterns in arguments of functions without a body (E0642), which become `_`.
fn without_repeated_errors(mut item: ItemTrait) -> ItemTrait {
    let mut names = Vec::new();
    item.items.retain(|item| match item {
        TraitItem::Fn(function) => {
            let name = function.sig.ident.unraw().to_string();
            let first = !names.contains(&name);
            names.push(name);
            first
        }
        _ => true,
    });
    for item in &mut item.items {
        let TraitItem::Fn(function) = item else {
            continue;
        };
        if function.default.is_some() {
            continue;
        }
        for input in &mut function.sig.inputs {
            if let FnArg::Typed(arg) = input
                && !is_plain_binding(&arg.pat)
            {
                *arg.pat = syn::parse_quote!(_);
            }
        }
    }
    item
}

fn fallback_tokens(input: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    quote! {
        #input
        #error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRAIT: &str = r#"
        pub trait Search {
            /// Finds hits.
            #[call(idempotent)]
            async fn search(&self, query: String) -> Result<Vec<u8>, String>;
            async fn ping(&self);
        }
    "#;

    fn expand(args: &str, item: &str) -> String {
        service(args.parse().unwrap(), item.parse().unwrap()).to_string()
    }

    #[test]
    fn emits_trait_client_and_server() {
        let out = expand(r#"name = "search", version = "1.0.0""#, TRAIT);
        for expected in [
            "pub trait Search",
            "pub struct SearchClient",
            "pub struct SearchServer",
        ] {
            assert!(out.contains(expected), "{expected} missing from {out}");
        }
        assert!(!out.contains("compile_error"));
        assert!(!out.contains("async fn"), "functions are rewritten: {out}");
        assert!(!out.contains("# [call"), "#[call] is consumed: {out}");
    }

    #[test]
    fn failure_keeps_the_trait_without_call_attributes() {
        let out = expand(r#"name = "search", version = "1""#, TRAIT);
        assert!(out.contains("compile_error"));
        assert!(out.contains("pub trait Search"));
        assert!(
            out.contains("async fn search"),
            "signatures are untouched: {out}"
        );
        assert!(!out.contains("# [call"), "#[call] is removed: {out}");
        assert!(!out.contains("SearchClient"), "{out}");
    }

    #[test]
    fn reports_every_error() {
        let out = expand(
            r#"version = "x", timout = "1s""#,
            "pub trait S { fn a(&self); }",
        );
        // missing name, bad version, unknown key, non-async fn
        assert_eq!(out.matches("compile_error").count(), 4, "{out}");
    }
}
