//! Command-line flags of the examples, read with `lexopt`: `-h`/`--help` prints the usage and
//! exits 0; an unknown flag, a stray argument, a missing or bad value prints what was wrong and
//! the usage, and exits with [`USAGE_ERROR`] before any work starts.
//!
//! Each example includes this file (`#[path = "flags/mod.rs"] mod flags;`; cargo does not take
//! a folder without `main.rs` for an example) and reads its own flags in a loop over
//! `parser.next()`, matching `lexopt::prelude::{Long, Short, Value}`, returning `Ok(None)` for
//! `-h`/`--help` (so that the reading can be tested with `Parser::from_args`).
#![allow(dead_code)] // each example uses some of these

use lexopt::{Error, Parser, ValueExt};
use std::fmt::Display;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// The exit code of a command line the example does not accept (the convention of getopt and
/// clap: 1 is for a run that failed, 2 for a command that was wrong).
pub const USAGE_ERROR: i32 = 2;

/// Reads the process's arguments with `read`, which returns the example's options, or `None`
/// for `-h`/`--help`: then prints `usage` and exits 0. On an error prints it with `usage` and
/// exits with [`USAGE_ERROR`].
pub fn parse_or_exit<T>(
    usage: &str,
    read: impl FnOnce(&mut Parser) -> Result<Option<T>, Error>,
) -> T {
    match read(&mut Parser::from_env()) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{usage}");
            std::process::exit(0);
        }
        Err(error) => {
            eprintln!("error: {error}\n\n{usage}");
            std::process::exit(USAGE_ERROR);
        }
    }
}

/// Runs `read` over `args` (without the program's name) as over a command line, its error as
/// text: for an example's unit tests of its flags.
pub fn parse_strings<T>(
    read: impl FnOnce(&mut Parser) -> Result<Option<T>, Error>,
    args: &[&str],
) -> Result<Option<T>, String> {
    read(&mut Parser::from_args(args.iter().copied())).map_err(|e| e.to_string())
}

/// For an example without options: accepts `--help` and nothing else.
pub fn no_options(usage: &str) {
    parse_or_exit(usage, |parser| match parser.next()? {
        None => Ok(Some(())),
        Some(lexopt::Arg::Short('h') | lexopt::Arg::Long("help")) => Ok(None),
        Some(arg) => Err(arg.unexpected()),
    })
}

/// The value of the flag `--name` just read, parsed as `T`; a bad value's message names the
/// flag and says why.
pub fn value<T>(parser: &mut Parser, name: &str) -> Result<T, Error>
where
    T: FromStr,
    T::Err: Display,
{
    let text = parser.value()?.string()?;
    text.parse()
        .map_err(|e| format!("invalid value {text:?} for --{name}: {e}").into())
}

/// Like [`value`], for a count or a size that must be at least 1.
pub fn at_least_one<T>(parser: &mut Parser, name: &str) -> Result<T, Error>
where
    T: FromStr + PartialOrd + From<u8>,
    T::Err: Display,
{
    let number: T = value(parser, name)?;
    if number < T::from(1) {
        return Err(format!("--{name} must be at least 1").into());
    }
    Ok(number)
}

/// Like [`value`], for a number that must lie in `range` (a size that must fit in memory
/// arithmetic, say).
pub fn in_range<T>(parser: &mut Parser, name: &str, range: RangeInclusive<T>) -> Result<T, Error>
where
    T: FromStr + PartialOrd + Display,
    T::Err: Display,
{
    let number: T = value(parser, name)?;
    if !range.contains(&number) {
        return Err(format!(
            "--{name} must be between {} and {}",
            range.start(),
            range.end()
        )
        .into());
    }
    Ok(number)
}

/// The value of `--name` when it must be one of `choices` (named in the message otherwise).
pub fn one_of<'c>(parser: &mut Parser, name: &str, choices: &[&'c str]) -> Result<&'c str, Error> {
    let text = parser.value()?.string()?;
    choices
        .iter()
        .find(|choice| **choice == text)
        .copied()
        .ok_or_else(|| {
            format!(
                "invalid value {text:?} for --{name}: expected one of {}",
                choices.join(", ")
            )
            .into()
        })
}

/// The most bytes an example allocates from its flags, on the host and on the device alike
/// (4 GiB: what a laptop spares). Sizes and counts are bounded by their flags' ranges; sizes
/// made of several flags together are checked with [`bounded_bytes`].
pub const MAX_ALLOCATION_BYTES: u64 = 4 << 30;

/// The bytes `factors` multiply to (counts from flags and an element size), refused when the
/// product passes [`MAX_ALLOCATION_BYTES`] (or 64 bits): the message says which flags (`what`)
/// to lower, so that an example exits with [`USAGE_ERROR`] rather than abort on an allocation.
pub fn bounded_bytes(what: &str, factors: &[u64]) -> Result<u64, Error> {
    factors
        .iter()
        .try_fold(1u64, |product, &factor| product.checked_mul(factor))
        .filter(|&bytes| bytes <= MAX_ALLOCATION_BYTES)
        .ok_or_else(|| {
            format!(
                "{what} would take more than the {} GiB this example allocates at most: lower them",
                MAX_ALLOCATION_BYTES >> 30
            )
            .into()
        })
}
