//! `{Trait}Client`: a typed handle whose methods only pick the function index and the argument
//! tuple; everything else (routing, retries, deadlines) lives in the runtime's `Client`.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use super::description;
use crate::model::{Method, Service};

pub(super) fn expand(service: &Service) -> TokenStream {
    let krate = &service.krate;
    let p = quote!(#krate::__private);
    let vis = &service.item.vis;
    let trait_ident = &service.item.ident;
    let client = format_ident!("{}Client", trait_ident);
    let doc = format!(
        "Client of the `{}` service, version {}, declared by the `{}` trait.",
        service.name, service.version, trait_ident
    );
    let description = description::expand(service, &p);
    let methods = service
        .methods
        .iter()
        .enumerate()
        .map(|(index, method)| call_method(service, method, index, &p));
    quote! {
        #[doc = #doc]
        #[derive(::core::clone::Clone, ::core::fmt::Debug)]
        // A program may use only the client or only the server of a service.
        #[allow(dead_code)]
        #vis struct #client {
            inner: #p::Client,
        }

        #[allow(dead_code)]
        impl #client {
            #description

            /// A client that calls providers of this service through `node`.
            #vis fn new(node: &#p::Node) -> Self {
                Self { inner: #p::Client::new(node, Self::description()) }
            }

            /// Client-side default options for every call of this client.
            #vis fn with_options(self, options: #p::CallOptions) -> Self {
                Self { inner: self.inner.with_options(options) }
            }

            /// Replaces the version requirement put on providers.
            #vis fn require(self, requirement: #p::VersionReq) -> Self {
                Self { inner: self.inner.require(requirement) }
            }

            #(#methods)*
        }
    }
}

/// One thin method: `self.inner.call(index, &(args…))`.
fn call_method(service: &Service, method: &Method, index: usize, p: &TokenStream) -> TokenStream {
    let vis = &service.item.vis;
    let ident = &method.ident;
    let docs = if method.docs.is_empty() {
        // Users may deny missing_docs; the trait function had none to copy.
        let doc = format!(
            "Calls `{}` on a provider of the `{}` service.",
            ident, service.name
        );
        quote!(#[doc = #doc])
    } else {
        let docs = &method.docs;
        quote!(#(#docs)*)
    };
    let names: Vec<_> = method.args.iter().map(|arg| &arg.ident).collect();
    let types = method.args.iter().map(|arg| &arg.ty);
    let tuple = match names.as_slice() {
        [] => quote!(()),
        [one] => quote!((#one,)),
        many => quote!((#(#many),*)),
    };
    let index = Literal::usize_suffixed(index);
    let (output, call) = match &method.result {
        Some((ok, err)) => (quote!(#p::Call<#ok, #err>), quote!(call)),
        None => {
            let output = &method.output;
            (
                quote!(#p::Call<#output, #p::Infallible>),
                quote!(call_plain),
            )
        }
    };
    quote! {
        #docs
        #vis fn #ident(&self, #(#names: #types),*) -> #output {
            self.inner.#call(#index, &#tuple)
        }
    }
}
