//! The front end of lopi's probe language: bpftrace's surface
//! (`func:malloc /pid == 42/ { @bytes[comm] = sum(arg0); }`) with SystemTap's safety: no loops,
//! bounded strings, maps and nesting, and every type, builtin and probe point checked before
//! anything runs.
//!
//! [`parse`] turns text into an [`ast::Script`]; [`check`] resolves its probe points through a
//! [`Resolver`], types everything and returns an [`ir::Program`] that a code generator walks
//! without checking again. Errors are [`Diagnostics`] with exact lines and columns, rendered
//! like rustc's. [`codegen`] turns the program into x86-64 machine code, one function per
//! probe, that the runtime calls with the helpers [`codegen::abi`] describes.
//! [`output`] merges the threads' maps and prints them as bpftrace does or as JSON; [`host`]
//! runs the probes that run in lopi itself (`begin`, `interval:`, `end`).
//!
//! The parser is written by hand (recursive descent, precedence climbing for the binary
//! operators) rather than generated: every token keeps its exact column for diagnostics, the
//! nesting limit is enforced inside the parser itself so that no input can exhaust the stack,
//! and the front end depends on nothing but `thiserror` (the code generator adds `iced-x86`).
#![forbid(unsafe_code)]

pub mod ast;
mod check;
pub mod codegen;
mod diag;
mod format;
mod glob;
pub mod host;
pub mod ir;
mod lexer;
pub mod limits;
pub mod lower;
mod needs;
pub mod output;
mod parse;
pub mod positional;
mod stack_keys;
mod walk;
mod syscall_args;

pub use check::{check, Resolver};
pub use syscall_args::syscall_args;
pub use diag::{Diagnostic, Diagnostics, Location, Note, Span};
pub use glob::{glob_match, is_glob};
pub use needs::Needs;
pub use parse::parse;

/// [`parse`] then [`check`].
pub fn compile_front(source: &str, resolver: &dyn Resolver) -> Result<ir::Program, Diagnostics> {
    check(&parse(source)?, resolver)
}
