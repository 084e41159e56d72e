//! The service description: plain data the runtime reads (name, version, compat, functions and
//! their options), built once in a `LazyLock`.

use proc_macro2::{Literal, TokenStream};
use quote::{ToTokens, quote};
use syn::ext::IdentExt;

use crate::model::Service;
use crate::options::{Options, Retry};
use crate::signature::normalize;

/// The `description()` associated function of the client.
pub(super) fn expand(service: &Service, p: &TokenStream) -> TokenStream {
    let name = &service.name;
    let version = &service.version;
    let (major, minor, patch) = (
        Literal::u64_unsuffixed(version.major),
        Literal::u64_unsuffixed(version.minor),
        Literal::u64_unsuffixed(version.patch),
    );
    let (pre, build) = (version.pre.as_str(), version.build.as_str());
    let compat = match &service.compat {
        Some(compat) => quote!(::core::option::Option::Some(#compat)),
        None => quote!(::core::option::Option::None),
    };
    let service_options = options(&service.options, p);
    let functions = service.methods.iter().map(|method| {
        let name = method.ident.unraw().to_string();
        let signature = &method.signature;
        let idempotent = method.idempotent;
        let at_most_once = method.at_most_once;
        let function_options = options(&method.options, p);
        // The wire shape is traced from the real types when the description is first read:
        // aliases are expanded by then. A type that cannot be traced keeps its text.
        let args = method.args.iter().map(|arg| {
            let ty = &arg.ty;
            let text = normalize(ty.to_token_stream());
            quote!(#p::trace::<#ty>(#text))
        });
        let params = method.args.iter().map(|arg| arg.ident.unraw().to_string());
        let output = &method.output;
        let output_text = normalize(output.to_token_stream());
        quote! {
            #p::FunctionDescription::new(#name, #signature, #idempotent, #function_options)
                .with_at_most_once(#at_most_once)
                .with_params(&[#(#params),*])
                .with_shape(#p::FunctionShape::new(
                    ::std::vec![#(#args),*],
                    #p::trace::<#output>(#output_text),
                ))
        }
    });
    let vis = &service.item.vis;
    quote! {
        /// The description this build declares: name, version, compat and functions.
        #vis fn description() -> &'static #p::ServiceDescription {
            static DESCRIPTION: #p::LazyLock<#p::ServiceDescription> = #p::LazyLock::new(|| {
                #p::ServiceDescription::new(
                    #name,
                    #p::version(#major, #minor, #patch, #pre, #build),
                    #compat,
                    #service_options,
                    ::std::vec![#(#functions),*],
                )
            });
            &DESCRIPTION
        }
    }
}

/// A `CallOptions` builder chain with only the keys that were given.
fn options(options: &Options, p: &TokenStream) -> TokenStream {
    let millis = |millis: u64| {
        let millis = Literal::u64_unsuffixed(millis);
        quote!(#p::Duration::from_millis(#millis))
    };
    let mut chain = quote!(#p::CallOptions::new());
    if let Some(timeout) = options.timeout {
        let timeout = millis(timeout);
        chain.extend(quote!(.timeout(#timeout)));
    }
    if let Some(wait) = options.wait_for_provider {
        let wait = millis(wait);
        chain.extend(quote!(.wait_for_provider(#wait)));
    }
    match &options.retry {
        None => {}
        Some(Retry::Enabled(enabled)) => chain.extend(quote!(.retry_enabled(#enabled))),
        Some(Retry::Settings(settings)) => {
            chain.extend(quote!(.retry_enabled(true)));
            if let Some(after) = settings.after {
                let after = millis(after);
                chain.extend(quote!(.retry_after(#after)));
            }
            if let Some(budget) = settings.budget {
                let budget = millis(budget);
                chain.extend(quote!(.retry_budget(#budget)));
            }
            if let Some(max_after) = settings.max_after {
                let max_after = millis(max_after);
                chain.extend(quote!(.retry_max_after(#max_after)));
            }
            if let Some(factor) = settings.factor {
                let factor = Literal::f64_unsuffixed(factor);
                chain.extend(quote!(.retry_factor(#factor)));
            }
            if let Some(jitter) = settings.jitter {
                chain.extend(quote!(.retry_jitter(#jitter)));
            }
            if let Some(overloaded) = settings.overloaded {
                let overloaded = Literal::u32_unsuffixed(overloaded);
                chain.extend(quote!(.overloaded_retries(#overloaded)));
            }
            // Each throttling key on its own, so that a layer may set one and leave the rest.
            if let Some(ratio) = settings.ratio {
                let ratio = Literal::f64_unsuffixed(ratio);
                chain.extend(quote!(.retry_ratio(#ratio)));
            }
            if let Some(window) = settings.window {
                let window = millis(window);
                chain.extend(quote!(.retry_window(#window)));
            }
            if let Some(floor) = settings.floor {
                let floor = Literal::u32_unsuffixed(floor);
                chain.extend(quote!(.retry_floor(#floor)));
            }
        }
    }
    if let Some(hedge) = &options.hedge {
        let after = millis(hedge.after);
        let max = Literal::u32_unsuffixed(hedge.max);
        chain.extend(quote!(.hedge(#after, #max)));
    }
    chain
}
