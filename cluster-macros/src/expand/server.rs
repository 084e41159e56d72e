//! `{Trait}Server<T>`: adapts any implementation of the trait to the runtime's `Provide`, by
//! mapping a function index to a closure that decodes the argument tuple and calls the trait.

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{ToTokens, format_ident, quote};

use crate::model::Service;

pub(super) fn expand(service: &Service) -> TokenStream {
    let krate = &service.krate;
    let p = quote!(#krate::__private);
    let vis = &service.item.vis;
    let trait_ident = &service.item.ident;
    let client = format_ident!("{}Client", trait_ident);
    let server = format_ident!("{}Server", trait_ident);
    let t = provider_param(service);
    // Locals get mixed-site spans so a user argument named `inner` or `args` cannot shadow them.
    let inner = Ident::new("inner", Span::mixed_site());
    let function = Ident::new("function", Span::mixed_site());
    let args = Ident::new("args", Span::mixed_site());
    let doc = format!(
        "Serves an implementation of `{}` as the `{}` service, version {}.",
        trait_ident, service.name, service.version
    );
    let arms = service.methods.iter().enumerate().map(|(index, method)| {
        let index = Literal::usize_suffixed(index);
        let ident = &method.ident;
        let bindings: Vec<Ident> = (0..method.args.len())
            .map(|n| Ident::new(&format!("arg{n}"), Span::mixed_site()))
            .collect();
        let types = method.args.iter().map(|arg| &arg.ty);
        let (pattern, ty) = match bindings.as_slice() {
            [] => (quote!(()), quote!(())),
            [one] => (quote!((#one,)), quote!((#(#types)*,))),
            many => (quote!((#(#many),*)), quote!((#(#types),*))),
        };
        quote! {
            #index => #p::dispatch_with(#args, move |#pattern: #ty| async move {
                <#t as #trait_ident>::#ident(&*#inner, #(#bindings),*).await
            }),
        }
    });
    let body = if service.methods.is_empty() {
        // Nothing to decode: keep `args` used so the impl compiles without warnings.
        quote! {
            let _ = #args;
            #p::unknown_function(#function)
        }
    } else {
        quote! {
            // Through the trait path: `Arc::clone` needs `Clone` in scope, which a
            // `#![no_implicit_prelude]` module does not have.
            let #inner = <#p::Arc<#t> as ::core::clone::Clone>::clone(&self.inner);
            match #function {
                #(#arms)*
                _ => #p::unknown_function(#function),
            }
        }
    };
    quote! {
        #[doc = #doc]
        // A program may use only the client or only the server of a service.
        #[allow(dead_code)]
        #vis struct #server<#t> {
            inner: #p::Arc<#t>,
        }

        #[allow(dead_code)]
        impl<#t: #trait_ident> #server<#t> {
            /// Wraps `provider` so a node can serve it.
            #vis fn new(provider: #t) -> Self {
                Self { inner: #p::Arc::new(provider) }
            }

            /// Wraps a provider that is already shared.
            #vis fn from_arc(provider: #p::Arc<#t>) -> Self {
                Self { inner: provider }
            }
        }

        impl<#t: #trait_ident> #p::Provide for #server<#t> {
            fn description(&self) -> &'static #p::ServiceDescription {
                #client::description()
            }

            fn dispatch(
                &self,
                #function: ::core::primitive::usize,
                #args: &[::core::primitive::u8],
            ) -> #p::DispatchFuture {
                #body
            }
        }
    }
}

/// The server's type parameter: `T`, unless the trait or its signatures already use a type
/// named `T`, which the parameter would shadow inside the generated impls.
fn provider_param(service: &Service) -> Ident {
    let mut tokens = service.item.ident.to_token_stream();
    for method in &service.methods {
        tokens.extend(method.output.to_token_stream());
        for arg in &method.args {
            tokens.extend(arg.ty.to_token_stream());
        }
    }
    if mentions(tokens, "T") {
        format_ident!("__Provider")
    } else {
        format_ident!("T")
    }
}

fn mentions(tokens: TokenStream, name: &str) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(ident) => ident == name,
        proc_macro2::TokenTree::Group(group) => mentions(group.stream(), name),
        _ => false,
    })
}
