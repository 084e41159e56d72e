//! The signature string of a function and the `Result<T, E>` split of its return type.
//!
//! The runtime compares signature strings to refuse calls between builds that disagree on a
//! function's types, so the rendering must be deterministic and independent of how the user
//! spaced their code.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{GenericArgument, Ident, PathArguments, Type, TypePath};

/// `name(Type1, Type2) -> Ret`, with `-> ()` when there is no return type.
pub(crate) fn signature<'a>(
    name: &Ident,
    args: impl IntoIterator<Item = &'a Type>,
    output: Option<&Type>,
) -> String {
    let args: Vec<String> = args
        .into_iter()
        .map(|ty| normalize(ty.to_token_stream()))
        .collect();
    let output = output.map_or_else(|| "()".to_owned(), |ty| normalize(ty.to_token_stream()));
    format!("{name}({}) -> {output}", args.join(", "))
}

/// Tokens joined by single spaces, then no space before `,` `>` `)` `]` `;` `?` `<`, none after
/// `<` `(` `[` `&`, none around `::`.
pub(crate) fn normalize(tokens: TokenStream) -> String {
    let mut pieces = Vec::new();
    flatten(tokens, &mut pieces);
    let mut out = String::new();
    let mut previous: Option<&str> = None;
    for piece in &pieces {
        if let Some(previous) = previous {
            let tight_before = matches!(
                piece.as_str(),
                "," | ">" | ")" | "]" | ";" | "?" | "::" | "<"
            );
            let tight_after = matches!(previous, "<" | "(" | "[" | "&" | "::");
            if !tight_before && !tight_after {
                out.push(' ');
            }
        }
        out.push_str(piece);
        previous = Some(piece);
    }
    out
}

/// Splits tokens into the pieces that spacing rules apply to. Multi-character operators that
/// matter in types (`::`, `->`) and lifetimes (`'a`) become one piece; `>>` stays two pieces so
/// that nested generics close the same way however the lexer glued them.
fn flatten(tokens: TokenStream, pieces: &mut Vec<String>) {
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        match token {
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{", "}"),
                    // Invisible groups come from macro_rules substitutions: no text of their own.
                    Delimiter::None => ("", ""),
                };
                if !open.is_empty() {
                    pieces.push(open.to_owned());
                }
                flatten(group.stream(), pieces);
                if !close.is_empty() {
                    pieces.push(close.to_owned());
                }
            }
            TokenTree::Punct(punct) => {
                let first = punct.as_char();
                let glued = match (first, tokens.peek()) {
                    (':', Some(TokenTree::Punct(next))) if next.as_char() == ':' => {
                        Some("::".to_owned())
                    }
                    ('-', Some(TokenTree::Punct(next))) if next.as_char() == '>' => {
                        Some("->".to_owned())
                    }
                    ('\'', Some(TokenTree::Ident(name))) => Some(format!("'{name}")),
                    _ => None,
                };
                match glued {
                    Some(glued) if punct.spacing() == proc_macro2::Spacing::Joint => {
                        tokens.next();
                        pieces.push(glued);
                    }
                    _ => pieces.push(first.to_string()),
                }
            }
            TokenTree::Ident(ident) => pieces.push(ident.to_string()),
            TokenTree::Literal(literal) => pieces.push(literal.to_string()),
        }
    }
}

/// `Some((T, E))` when `ty` is syntactically a path ending in `Result` with exactly two type
/// arguments (`Result<T, E>`, `std::result::Result<T, E>`). Anything else, including aliases
/// such as `io::Result<T>`, is a plain return value.
pub(crate) fn split_result(ty: &Type) -> Option<(&Type, &Type)> {
    let Type::Path(TypePath {
        qself: None, path, ..
    }) = ungroup(ty)
    else {
        return None;
    };
    let last = path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(arguments) = &last.arguments else {
        return None;
    };
    match arguments.args.iter().collect::<Vec<_>>().as_slice() {
        [GenericArgument::Type(ok), GenericArgument::Type(err)] => Some((ok, err)),
        _ => None,
    }
}

/// Looks through invisible groups, which macro_rules wraps around `$t:ty` substitutions.
fn ungroup(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => ungroup(&group.elem),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::format_ident;

    fn ty(text: &str) -> Type {
        syn::parse_str(text).unwrap()
    }

    fn norm(text: &str) -> String {
        normalize(ty(text).to_token_stream())
    }

    #[test]
    fn normalizes_spacing() {
        assert_eq!(
            norm("Result < Vec<Hit> ,SearchError >"),
            "Result<Vec<Hit>, SearchError>"
        );
        assert_eq!(
            norm("Option< std :: string :: String>"),
            "Option<std::string::String>"
        );
        assert_eq!(norm(":: std::vec::Vec<u8>"), "::std::vec::Vec<u8>");
        assert_eq!(
            norm("HashMap<String,Vec<(u8,u16)>>"),
            "HashMap<String, Vec<(u8, u16)>>"
        );
        assert_eq!(norm("[ u8 ; 32 ]"), "[u8; 32]");
        assert_eq!(norm("& 'static str"), "&'static str");
        assert_eq!(norm("&mut Vec<u8>"), "&mut Vec<u8>");
        assert_eq!(norm("( )"), "()");
        assert_eq!(norm("(u8 ,)"), "(u8,)");
        assert_eq!(
            norm("Box<dyn Error+Send+'static>"),
            "Box<dyn Error + Send + 'static>"
        );
        assert_eq!(norm("<T as Trait>::Assoc"), "<T as Trait>::Assoc");
    }

    #[test]
    fn normalizes_tokens_built_by_quote() {
        let tokens = quote::quote!(::std::collections::BTreeMap<String, Vec<Vec<u8>>>);
        assert_eq!(
            normalize(tokens),
            "::std::collections::BTreeMap<String, Vec<Vec<u8>>>"
        );
    }

    #[test]
    fn renders_signatures() {
        let (string, limit) = (ty("String"), ty("u32"));
        let output = ty("Result<Vec<Hit>, SearchError>");
        assert_eq!(
            signature(&format_ident!("search"), [&string, &limit], Some(&output)),
            "search(String, u32) -> Result<Vec<Hit>, SearchError>"
        );
        assert_eq!(signature(&format_ident!("ping"), [], None), "ping() -> ()");
        assert_eq!(
            signature(&format_ident!("ping"), [], Some(&ty("()"))),
            "ping() -> ()"
        );
        let text = ty("&str");
        let output = ty("Option<std :: string::String>");
        assert_eq!(
            signature(&format_ident!("get"), [&text], Some(&output)),
            "get(&str) -> Option<std::string::String>"
        );
    }

    #[test]
    fn detects_result() {
        for text in [
            "Result<u8, E>",
            "std::result::Result<Vec<u8>, my::Error>",
            "::core::result::Result<(), E>",
            "crate::Result<u8, E>",
        ] {
            let ty = ty(text);
            let (ok, err) = split_result(&ty).unwrap_or_else(|| panic!("{text}"));
            assert!(!ok.to_token_stream().is_empty() && !err.to_token_stream().is_empty());
        }
        let ty = ty("Result<Vec<u8>, Error>");
        let (ok, err) = split_result(&ty).unwrap();
        assert_eq!(normalize(ok.to_token_stream()), "Vec<u8>");
        assert_eq!(normalize(err.to_token_stream()), "Error");
    }

    #[test]
    fn other_types_are_plain() {
        for text in [
            "io::Result<u8>",
            "Result",
            "Result<u8, E, F>",
            "Result<'a, u8>",
            "Option<Result<u8, E>>",
            "(Result<u8, E>)",
            "<X as Y>::Result<u8, E>",
            "MyResult<u8, E>",
            "Result::<u8, E>::Ok",
            "u64",
            "()",
        ] {
            assert!(split_result(&ty(text)).is_none(), "{text}");
        }
    }

    #[test]
    fn looks_through_invisible_groups() {
        let inner = ty("Result<u8, E>");
        let grouped = Type::Group(syn::TypeGroup {
            attrs: Vec::new(),
            group_token: Default::default(),
            elem: Box::new(inner),
        });
        assert!(split_result(&grouped).is_some());
    }
}
