//! `#[gpu_test]`: the attribute every test of the GPU harness (`tests/gpu/`) carries instead
//! of `#[test]`. It makes the function a `#[test]` whose body runs with
//! `crate::harness::AfterTest` held, so the harness checks the Vulkan validation log when the
//! test ends (returning, or returning early with `?`), without a call written in the test.
//! A test that panics fails anyway; the check then stays quiet.
//!
//! Written on `proc_macro` alone: the item is a function whose last token is its body, which
//! is all the wrapping needs to know.

use proc_macro::{Delimiter, Group, Span, TokenStream, TokenTree};

/// Marks a GPU test. Takes no arguments; goes on a function (`fn name() { ... }` or
/// `fn name() -> Result<..> { ... }`), with any other attribute (`#[ignore]`,
/// `#[should_panic]`) beside it.
#[proc_macro_attribute]
pub fn gpu_test(arguments: TokenStream, item: TokenStream) -> TokenStream {
    if let Some(first) = arguments.into_iter().next() {
        return compile_error(first.span(), "`#[gpu_test]` takes no arguments");
    }
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
    // The test's own block stays whole, as the tail of the new body, so its value (a
    // `Result` for tests that use `?`) is the function's and its `return`s leave the function
    // as before; the guard is dropped last, after everything the test made.
    let mut wrapped = tokens_of("let _after_test = crate::harness::AfterTest::begin();");
    wrapped.extend([TokenTree::Group(body)]);
    let mut test = tokens_of("#[test]");
    test.extend(tokens);
    test.extend([TokenTree::Group(Group::new(Delimiter::Brace, wrapped))]);
    test
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
