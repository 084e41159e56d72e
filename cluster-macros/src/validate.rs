//! Shape checks on the user's trait. Each check reports at the token that is wrong and keeps
//! going, so one build lists every problem.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{
    FnArg, GenericArgument, ItemTrait, Pat, PatIdent, PathArguments, ReceiverKind, ReturnType,
    TraitItem, TraitItemFn, Type,
};

use crate::attr::is_call;
use crate::errors::Errors;
use crate::signature::normalize;

/// Names the generated client already uses for its own methods, and those of the traits it
/// derives (a function named `clone` would shadow `Clone::clone` in method calls).
const RESERVED: [&str; 6] = [
    "new",
    "with_options",
    "require",
    "description",
    "clone",
    "fmt",
];

/// Trait-level checks: no generics, no where clause, no `#[call]` on the trait.
pub(crate) fn check_trait(item: &ItemTrait, errors: &mut Errors) {
    if !item.generics.params.is_empty() {
        errors.spanned(
            &item.generics,
            "a #[service] trait cannot have generic parameters: clients and providers must agree on concrete types",
        );
    }
    if let Some(where_clause) = &item.generics.where_clause {
        errors.spanned(
            where_clause,
            "a #[service] trait cannot have a where clause",
        );
    }
    for attr in item.attrs.iter().filter(|attr| is_call(attr)) {
        errors.spanned(
            attr,
            "#[call] is only valid on the functions of a #[service] trait, not on the trait itself",
        );
    }
}

/// Anything but a method is refused: the service is its list of functions.
pub(crate) fn check_non_method(item: &TraitItem, errors: &mut Errors) {
    let (tokens, kind): (TokenStream, &str) = match item {
        TraitItem::Const(item) => (item.const_token.to_token_stream(), "an associated const"),
        TraitItem::Type(item) => (item.type_token.to_token_stream(), "an associated type"),
        TraitItem::Macro(item) => (item.mac.path.to_token_stream(), "a macro invocation"),
        TraitItem::Fn(_) => return,
        other => (other.to_token_stream(), "an item"),
    };
    errors.spanned(
        tokens,
        format!("only `async fn` methods are allowed in a #[service] trait, found {kind}"),
    );
}

/// Method checks: `async fn name(&self, a: A, ...) -> R;` with no generics, body or patterns.
pub(crate) fn check_fn(function: &TraitItemFn, errors: &mut Errors) {
    let sig = &function.sig;
    for attr in &function.attrs {
        if attr.path().is_ident("cfg") {
            errors.spanned(
                attr,
                "#[cfg] is not supported on service functions: a function's index on the wire is its position, so every build must declare the same functions",
            );
        }
    }
    if let Some(token) = &sig.constness {
        errors.spanned(token, "service functions cannot be `const`");
    }
    if let syn::Safety::Unsafe(token) = &sig.safety {
        errors.spanned(token, "service functions cannot be `unsafe`");
    }
    if let Some(abi) = &sig.abi {
        errors.spanned(abi, "service functions cannot declare an ABI");
    }
    if sig.asyncness.is_none() {
        errors.spanned(
            sig.fn_token,
            "service functions must be `async fn`: write `async fn` here",
        );
    }
    if !sig.generics.params.is_empty() {
        errors.spanned(
            &sig.generics,
            "service functions cannot have generic parameters: the client and the provider must agree on concrete types",
        );
    }
    if let Some(where_clause) = &sig.generics.where_clause {
        errors.spanned(where_clause, "service functions cannot have a where clause");
    }
    check_receiver(function, errors);
    for input in sig.inputs.iter().skip(1) {
        let FnArg::Typed(arg) = input else { continue };
        if !is_plain_binding(&arg.pat) {
            errors.spanned(
                &arg.pat,
                "service function arguments must be a plain `name: Type`: patterns are not supported",
            );
        }
        check_type(&arg.ty, "argument", errors);
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        check_type(ty, "return", errors);
    }
    if let Some(body) = &function.default {
        errors.at(
            body.brace_token.span.open(),
            "service functions cannot have a default body: implement them in the provider's impl",
        );
    }
}

/// `name`, the only argument pattern the generated client and server can reuse.
pub(crate) fn is_plain_binding(pat: &Pat) -> bool {
    matches!(
        pat,
        Pat::Ident(PatIdent {
            by_ref: None,
            mutability: None,
            subpat: None,
            ..
        })
    )
}

fn check_receiver(function: &TraitItemFn, errors: &mut Errors) {
    let sig = &function.sig;
    match sig.inputs.first() {
        Some(FnArg::Receiver(receiver))
            if matches!(&receiver.kind, ReceiverKind::Reference(_, _, None))
                && receiver.mutability.is_none() => {}
        Some(FnArg::Receiver(receiver)) => errors.spanned(
            receiver,
            format!(
                "expected `&self`, found `{}`: a provider is shared by concurrent calls",
                normalize(receiver.to_token_stream())
            ),
        ),
        _ => errors.at(
            sig.paren_token.span.join(),
            "service functions must take `&self` first, e.g. `async fn ping(&self)`",
        ),
    }
}

/// Refuses types that cannot cross the network as owned values or that the generated client
/// cannot name: `impl Trait`, references, `Self`.
fn check_type(ty: &Type, position: &str, errors: &mut Errors) {
    match ty {
        Type::ImplTrait(_) => errors.spanned(
            ty,
            format!("`impl Trait` is not allowed in a service function's {position} type: use a concrete type"),
        ),
        Type::Reference(_) => errors.spanned(
            ty,
            format!("references are not allowed in a service function's {position} type: values cross the network, use an owned type such as String or Vec<T>"),
        ),
        Type::Path(path) => {
            if let Some(qself) = &path.qself {
                check_type(&qself.ty, position, errors);
            }
            if path.qself.is_none() && path.path.segments.first().is_some_and(|s| s.ident == "Self") {
                errors.spanned(
                    ty,
                    format!("`Self` is not allowed in a service function's {position} type: the generated client has no `Self` of the trait, name the type directly"),
                );
                return;
            }
            for segment in &path.path.segments {
                match &segment.arguments {
                    PathArguments::AngleBracketed(arguments) => {
                        for argument in &arguments.args {
                            match argument {
                                GenericArgument::Type(ty) => check_type(ty, position, errors),
                                GenericArgument::AssocType(assoc) => check_type(&assoc.ty, position, errors),
                                _ => {}
                            }
                        }
                    }
                    PathArguments::Parenthesized(arguments) => {
                        for argument in &arguments.inputs {
                            check_type(&argument.ty, position, errors);
                        }
                        if let ReturnType::Type(_, ty) = &arguments.output {
                            check_type(ty, position, errors);
                        }
                    }
                    PathArguments::None => {}
                }
            }
        }
        Type::Array(array) => check_type(&array.elem, position, errors),
        Type::Slice(slice) => check_type(&slice.elem, position, errors),
        Type::Paren(paren) => check_type(&paren.elem, position, errors),
        Type::Group(group) => check_type(&group.elem, position, errors),
        Type::Tuple(tuple) => {
            for ty in &tuple.elems {
                check_type(ty, position, errors);
            }
        }
        _ => {}
    }
}

/// Function names seen so far: they must be unique (the name identifies the function to a
/// provider) and must not collide with the generated client's own methods.
#[derive(Default)]
pub(crate) struct Names {
    seen: Vec<String>,
}

impl Names {
    pub(crate) fn check(&mut self, function: &TraitItemFn, errors: &mut Errors) {
        let ident = &function.sig.ident;
        let name = ident.unraw().to_string();
        if RESERVED.contains(&name.as_str()) {
            errors.spanned(
                ident,
                format!(
                    "function name `{name}` is reserved: the generated client defines {}; rename the function",
                    RESERVED.join(", ")
                ),
            );
        } else if self.seen.contains(&name) {
            errors.spanned(
                ident,
                format!("duplicate function `{name}`: function names in a service must be unique"),
            );
        } else {
            self.seen.push(name);
        }
    }
}
