//! `#[gpu_test]`: the attribute every test of the GPU harness (`tests/gpu/`) carries instead
//! of `#[test]`. It makes the function a `#[test]` whose body runs with
//! `crate::harness::AfterTest` held, so the harness checks the Vulkan validation log when the
//! test ends (returning, or returning early with `?`), without a call written in the test.
//! A test that panics fails anyway; the check then stays quiet.
//!
//! `#[gpu_test(needs = Vulkan)]` names what the test needs of the machine beyond a GPU adapter
//! (a variant of `crate::harness::Need`): where the machine lacks it, the harness counts the
//! test as skipped, with that reason, in the summary it prints when the binary ends, and the
//! body does not run.
//!
//! Written on `proc_macro` alone: the item is a function whose last token is its body, which
//! is all the wrapping needs to know.

use proc_macro::{Delimiter, Group, Span, TokenStream, TokenTree};

/// Marks a GPU test. Takes nothing or `needs = Need` (a variant of `crate::harness::Need`);
/// goes on a function (`fn name() { ... }` or `fn name() -> Result<..> { ... }`), with any
/// other attribute (`#[ignore]`, `#[should_panic]`) beside it.
#[proc_macro_attribute]
pub fn gpu_test(arguments: TokenStream, item: TokenStream) -> TokenStream {
    let need = match parse_need(arguments) {
        Ok(need) => need,
        Err(span) => {
            return compile_error(
                span,
                "`#[gpu_test]` takes nothing or `needs = Need` (a variant of `crate::harness::Need`)",
            )
        }
    };
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    let is_function = tokens
        .iter()
        .any(|token| matches!(token, TokenTree::Ident(ident) if ident.to_string() == "fn"));
    let body = match tokens.pop() {
        Some(TokenTree::Group(body)) if is_function && body.delimiter() == Delimiter::Brace => body,
        other => {
            let span = other.map_or_else(Span::call_site, |token| token.span());
            return compile_error(span, "`#[gpu_test]` goes on a function with a body");
        }
    };
    let name = tokens
        .iter()
        .skip_while(|token| !matches!(token, TokenTree::Ident(ident) if ident.to_string() == "fn"))
        .nth(1)
        .map(|token| token.to_string())
        .unwrap_or_default();
    // The test's own block stays whole, as the tail of the new body, so its value (a
    // `Result` for tests that use `?`) is the function's and its `return`s leave the function
    // as before; the guard is dropped last, after everything the test made. A test whose need
    // the machine lacks returns at once with the value `harness::Skipped` gives its type.
    let begin = match need {
        None => "let _after_test = crate::harness::AfterTest::begin();".to_string(),
        Some(need) => format!(
            "let ::core::option::Option::Some(_after_test) = crate::harness::AfterTest::begin_needing(\
               crate::harness::Need::{need}, ::core::concat!(::core::module_path!(), \"::{name}\")) \
             else {{ return crate::harness::Skipped::skipped(); }};"
        ),
    };
    let mut wrapped = tokens_of(&begin);
    wrapped.extend([TokenTree::Group(body)]);
    let mut test = tokens_of("#[test]");
    test.extend(tokens);
    test.extend([TokenTree::Group(Group::new(Delimiter::Brace, wrapped))]);
    test
}

/// The `Need` variant of `needs = Need`, `None` for no arguments, or the span of what does
/// not parse.
fn parse_need(arguments: TokenStream) -> Result<Option<String>, Span> {
    let tokens: Vec<TokenTree> = arguments.into_iter().collect();
    match tokens.as_slice() {
        [] => Ok(None),
        [TokenTree::Ident(key), TokenTree::Punct(eq), TokenTree::Ident(need)]
            if key.to_string() == "needs" && eq.as_char() == '=' =>
        {
            Ok(Some(need.to_string()))
        }
        [first, ..] => Err(first.span()),
    }
}

/// The tokens of a fixed piece of Rust written in this file.
fn tokens_of(code: &str) -> TokenStream {
    code.parse()
        .unwrap_or_else(|_| panic!("gpu_test's own code {code:?} must parse"))
}

/// A `compile_error!` at `span`, so misuse points at the test rather than at this crate.
fn compile_error(span: Span, message: &str) -> TokenStream {
    let error: TokenStream = tokens_of(&format!("::core::compile_error!({message:?});"));
    error
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect()
}
