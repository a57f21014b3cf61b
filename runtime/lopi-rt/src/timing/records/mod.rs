//! What a process records in the data file besides its threads' chunks: its memory map
//! (`maps.rs`), and at its end the CPU times (`cpus.rs`) and names (`names.rs`) of the threads
//! it ends, read from the kernel's files (`procfs.rs`). Imports only `base/`.
pub(crate) mod cpus;
pub(crate) mod maps;
pub(crate) mod names;
pub(crate) mod procfs;
