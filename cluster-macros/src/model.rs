//! The validated service: what the expansion reads. Built only when every check passed, so the
//! expansion never has to handle a half-valid trait.

use syn::ext::IdentExt;
use syn::{
    Attribute, FnArg, Ident, ItemTrait, Pat, Path, ReturnType, TraitItem, TraitItemFn, Type,
};

use crate::attr::{CallArgs, ServiceArgs, is_call, parse_call};
use crate::errors::Errors;
use crate::options::Options;
use crate::signature::{signature, split_result};
use crate::validate;

/// One `#[service]` trait.
pub(crate) struct Service {
    /// The user's trait with `#[call]` attributes removed.
    pub(crate) item: ItemTrait,
    /// Path to the runtime crate (`::cluster` unless `crate = "…"`).
    pub(crate) krate: Path,
    pub(crate) name: String,
    pub(crate) version: semver::Version,
    pub(crate) compat: Option<String>,
    pub(crate) options: Options,
    /// In declaration order: a function's position is its index on the wire.
    pub(crate) methods: Vec<Method>,
}

/// One function of the service.
pub(crate) struct Method {
    pub(crate) ident: Ident,
    /// The `#[doc]` attributes, copied onto the client method.
    pub(crate) docs: Vec<Attribute>,
    pub(crate) args: Vec<Arg>,
    /// The declared return type, `()` when there is none.
    pub(crate) output: Type,
    /// `Some((T, E))` when `output` is `Result<T, E>`.
    pub(crate) result: Option<(Type, Type)>,
    pub(crate) signature: String,
    pub(crate) idempotent: bool,
    pub(crate) at_most_once: bool,
    pub(crate) options: Options,
}

/// One `name: Type` argument.
pub(crate) struct Arg {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
}

impl Service {
    /// Checks the trait and builds the model; `None` if anything was reported to `errors`.
    pub(crate) fn new(args: ServiceArgs, item: &ItemTrait, errors: &mut Errors) -> Option<Self> {
        validate::check_trait(item, errors);
        let mut names = validate::Names::default();
        let mut methods = Vec::new();
        // One pass in declaration order, so errors are listed in source order.
        for trait_item in &item.items {
            match trait_item {
                TraitItem::Fn(function) => {
                    methods.push(Method::new(function, errors));
                    names.check(function, errors);
                }
                other => validate::check_non_method(other, errors),
            }
        }
        let (Some(name), Some(version)) = (args.name, args.version) else {
            return None;
        };
        if !errors.is_empty() {
            return None;
        }
        Some(Self {
            item: strip_call_attrs(item.clone()),
            krate: args.krate.unwrap_or_else(|| syn::parse_quote!(::cluster)),
            name,
            version,
            compat: args.compat,
            options: args.options,
            methods,
        })
    }
}

impl Method {
    fn new(function: &TraitItemFn, errors: &mut Errors) -> Self {
        let mut call: Option<CallArgs> = None;
        for attr in function.attrs.iter().filter(|attr| is_call(attr)) {
            if call.is_some() {
                errors.spanned(
                    attr,
                    "duplicate #[call] attribute: put all keys in one #[call(...)]",
                );
            } else {
                call = Some(parse_call(attr, errors));
            }
        }
        validate::check_fn(function, errors);
        if let Some(call) = &call
            && let Some(span) = call.options.hedge_span
            && !call.idempotent
        {
            errors.at(
                span,
                "hedge(...) sends copies of a call to several providers at once: only an \
                 `idempotent` function may be hedged, e.g. #[call(idempotent, hedge(after = \"50ms\", max = 1))]",
            );
        }
        let sig = &function.sig;
        // Anything that is not `name: Type` was reported by check_fn; the model is then discarded.
        let args: Vec<Arg> = sig
            .inputs
            .iter()
            .filter_map(|input| match input {
                FnArg::Typed(arg) => match &*arg.pat {
                    Pat::Ident(pat) => Some(Arg {
                        ident: pat.ident.clone(),
                        ty: (*arg.ty).clone(),
                    }),
                    _ => None,
                },
                FnArg::Receiver(_) => None,
            })
            .collect();
        let declared = match &sig.output {
            ReturnType::Type(_, ty) => Some(&**ty),
            ReturnType::Default => None,
        };
        let output: Type = declared.cloned().unwrap_or_else(|| syn::parse_quote!(()));
        let result = split_result(&output).map(|(ok, err)| (ok.clone(), err.clone()));
        let call = call.unwrap_or_default();
        Self {
            ident: sig.ident.clone(),
            docs: function
                .attrs
                .iter()
                .filter(|attr| attr.path().is_ident("doc"))
                .cloned()
                .collect(),
            signature: signature(&sig.ident.unraw(), args.iter().map(|arg| &arg.ty), declared),
            args,
            output,
            result,
            idempotent: call.idempotent,
            at_most_once: call.at_most_once,
            options: call.options,
        }
    }
}

/// The trait without `#[call]` attributes, which would otherwise be unknown attributes to rustc.
pub(crate) fn strip_call_attrs(mut item: ItemTrait) -> ItemTrait {
    item.attrs.retain(|attr| !is_call(attr));
    for trait_item in &mut item.items {
        let attrs = match trait_item {
            TraitItem::Fn(item) => &mut item.attrs,
            TraitItem::Const(item) => &mut item.attrs,
            TraitItem::Type(item) => &mut item.attrs,
            TraitItem::Macro(item) => &mut item.attrs,
            _ => continue,
        };
        attrs.retain(|attr| !is_call(attr));
    }
    item
}
