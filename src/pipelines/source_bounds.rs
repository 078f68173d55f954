//! What kernel sources the compiler accepts, and where it runs, so that no source, whatever its
//! bytes, aborts or panics the caller.
//!
//! naga's WGSL front end lowers expressions recursively: about 1 KB of stack per level of
//! nesting (measured on naga 30, release build), so 20,000 chained `+ 1u` or unary `~` (100 KB
//! of text) overflow an 8 MiB main thread and abort the process; its time also grows with the
//! square of a chain of `&&` (20,000 took 5 s, 200,000 took minutes). Validation and the
//! SPIR-V back end do not recurse on expressions (20,000 levels ran on a 128 KiB stack).
//! So every source is parsed, validated and reflected on a thread of its own with
//! [`COMPILER_STACK_BYTES`] of stack (reserved address space; only what is used is touched),
//! inside which a panic of the front end is caught, and WGSL beyond two documented bounds is
//! refused before parsing:
//! - [`MAX_WGSL_SOURCE_BYTES`] of text;
//! - [`MAX_WGSL_EXPRESSION_DEPTH`]: an upper bound of an expression's nesting, counted on the
//!   text by `expression_depth`: each operator, `.`, `(` or `[` of one statement adds
//!   one, and a `,` goes back to the count at its enclosing bracket. 1024 levels need under
//!   1 MiB of stack, a 64th of the thread's.
//!
//! SPIR-V is bounded by [`MAX_SPIRV_WORDS`].

/// The most bytes of WGSL [`crate::Context::kernel`] compiles: 4 MiB, far above real kernels
/// (generated matmuls are tens of KiB), and a bound on the front end's time.
pub const MAX_WGSL_SOURCE_BYTES: usize = 4 << 20;

/// The deepest expression nesting a WGSL kernel may have: 1024, counted on the text (each
/// operator, `.`, `(` or `[` of one statement adds a level; arguments are siblings). Split a
/// longer chain into `let`s. naga's parser sets a lower bound of its own on one kind of
/// nesting: expressions inside parentheses, brackets or call arguments (and statements inside
/// blocks) about 200 deep are a [`crate::Error::KernelCompile`] with its message "Parser
/// recursion limit exceeded"; a chain of operators (`x + 1u + 1u ...`) reaches 1024.
pub const MAX_WGSL_EXPRESSION_DEPTH: usize = 1024;

/// The most 32-bit words of SPIR-V [`crate::Context::kernel_with`] compiles: 4 Mi words
/// (16 MiB).
pub const MAX_SPIRV_WORDS: usize = 4 << 20;

/// The longest entry-point name, in bytes, [`crate::Context::kernel`] takes: 256, the most a
/// Vulkan pipeline's `pName` may be (the Khronos validation layer refuses longer). Refused on
/// every backend, so a kernel accepted on one is accepted on all.
pub const MAX_ENTRY_POINT_BYTES: usize = 256;

/// Binding numbers [`crate::Context::kernel`] takes are below this: 65,536, on every device, on
/// top of its `max_bindings_per_bind_group`. wgpu's GL backend reports no bound of its own and
/// allocates a table as long as the largest binding number (as some Vulkan drivers do), so
/// `@binding(4000000000)` cost gigabytes.
pub const MAX_BINDING_NUMBERS: u32 = 1 << 16;

/// Stack of the thread that parses, validates and reflects a kernel: 64 MiB, 64 times what
/// the deepest accepted WGSL needs.
pub(crate) const COMPILER_STACK_BYTES: usize = 64 << 20;

/// Why a WGSL source is beyond what gpu-arena compiles.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SourceBoundsError {
    /// The source is longer than [`MAX_WGSL_SOURCE_BYTES`].
    #[error("the source has {bytes} bytes, more than the {MAX_WGSL_SOURCE_BYTES} gpu-arena compiles: split it into several kernels")]
    TooLong {
        /// The source's length in bytes.
        bytes: usize,
    },
    /// An expression nests deeper than [`MAX_WGSL_EXPRESSION_DEPTH`].
    #[error("an expression at line {line} nests at least {depth} operations deep, more than the {MAX_WGSL_EXPRESSION_DEPTH} gpu-arena compiles (the WGSL compiler recurses once per level): split it into `let` steps")]
    TooDeep {
        /// The line where the depth is reached.
        line: usize,
        /// The depth counted (an upper bound of the true depth).
        depth: usize,
    },
}

/// Errors when `source` is beyond [`MAX_WGSL_SOURCE_BYTES`] or [`MAX_WGSL_EXPRESSION_DEPTH`].
pub(crate) fn check_wgsl_bounds(source: &str) -> Result<(), SourceBoundsError> {
    if source.len() > MAX_WGSL_SOURCE_BYTES {
        return Err(SourceBoundsError::TooLong {
            bytes: source.len(),
        });
    }
    let (depth, line) = expression_depth(source);
    if depth > MAX_WGSL_EXPRESSION_DEPTH {
        return Err(SourceBoundsError::TooDeep { line, depth });
    }
    Ok(())
}

/// An upper bound of the nesting of WGSL expressions, counted on the text, and the line where
/// it is reached: within one statement (between `;`, `{` and `}`), each operator character,
/// `.` (not a decimal point), `(` and `[` adds one level; a `,` returns to the count at its
/// enclosing bracket (arguments are siblings); comments count nothing. Every level of an
/// expression tree is at least one of these characters, so the true depth is at most this.
pub(crate) fn expression_depth(source: &str) -> (usize, usize) {
    let bytes = source.as_bytes();
    let (mut count, mut max, mut max_line, mut line) = (0usize, 0usize, 1usize, 1usize);
    let mut brackets: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        match b {
            b'\n' => line += 1,
            b'/' if next == Some(b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if next == Some(b'*') => {
                // Block comments nest in WGSL.
                let mut depth = 0usize;
                while i < bytes.len() {
                    match (bytes[i], bytes.get(i + 1).copied()) {
                        (b'/', Some(b'*')) => {
                            depth += 1;
                            i += 2;
                        }
                        (b'*', Some(b'/')) => {
                            depth -= 1;
                            i += 2;
                            if depth == 0 {
                                break;
                            }
                        }
                        (c, _) => {
                            line += usize::from(c == b'\n');
                            i += 1;
                        }
                    }
                }
                continue;
            }
            b';' | b'{' | b'}' => {
                count = 0;
                brackets.clear();
            }
            b'(' | b'[' => {
                count += 1;
                brackets.push(count);
            }
            b')' | b']' => {
                brackets.pop();
            }
            b',' => count = brackets.last().copied().unwrap_or(0),
            b'.' if i > 0 && bytes[i - 1].is_ascii_digit() => {}
            b'+' | b'-' | b'*' | b'/' | b'%' | b'&' | b'|' | b'^' | b'~' | b'!' | b'<' | b'>'
            | b'=' | b'.' => count += 1,
            _ => {}
        }
        if count > max {
            max = count;
            max_line = line;
        }
        i += 1;
    }
    (max, max_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_unary_runs_and_brackets_count_one_level_each_and_arguments_are_siblings() {
        assert_eq!(expression_depth("x = a + b + c;").0, 3);
        assert_eq!(expression_depth("x = ~~~~a;").0, 5);
        assert_eq!(expression_depth("x = f(a + b, c + d);").0, 3);
        assert_eq!(expression_depth("x = f(a + b + c + d, e);").0, 5);
        assert_eq!(expression_depth("x = 1.5 + 2.25;").0, 2);
        // Statements reset the count; comments count nothing.
        assert_eq!(expression_depth("a = b + c; d = e + f;").0, 2);
        assert_eq!(
            expression_depth("// ------------\n/* -- /* ++ */ -- */ x = 1;").0,
            1
        );
    }

    #[test]
    fn long_chains_are_refused_before_the_compiler_sees_them() {
        let ok = format!("fn f() {{ var x = 0u; x = x{}; }}", " + 1u".repeat(1000));
        assert!(check_wgsl_bounds(&ok).is_ok());
        let deep = format!("fn f() {{ var x = 0u; x = x{}; }}", " + 1u".repeat(20_000));
        let err = check_wgsl_bounds(&deep).unwrap_err();
        assert!(
            matches!(err, SourceBoundsError::TooDeep { line: 1, .. }),
            "{err}"
        );
        let err = err.to_string();
        assert!(err.contains("1024") && err.contains("let"), "{err}");
        let big = " ".repeat(MAX_WGSL_SOURCE_BYTES + 1);
        assert_eq!(
            check_wgsl_bounds(&big).unwrap_err(),
            SourceBoundsError::TooLong {
                bytes: MAX_WGSL_SOURCE_BYTES + 1
            }
        );
    }
}
