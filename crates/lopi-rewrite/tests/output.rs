//! `write_atomically`: a regular file is replaced whole (through a temporary file and a
//! rename); a path that is not a regular file (a FIFO here, as `/dev/null` or `/dev/stdout`
//! would be) is written into and stays what it was, never replaced by a regular file.
use std::io::Read as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::PathBuf;
use std::process::Command;

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("output").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn regular_files_are_replaced_whole() {
    let dir = dir("regular");
    let path = dir.join("out");
    std::fs::write(&path, b"old contents, longer than the new").unwrap();
    lopi_rewrite::write_atomically(&path, b"new", 0o640).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
}

#[test]
fn a_fifo_is_written_into_not_replaced() {
    let dir = dir("fifo");
    let fifo = dir.join("pipe");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success(), "mkfifo");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            std::fs::File::open(&fifo).unwrap().read_to_end(&mut got).unwrap();
            got
        })
    };
    lopi_rewrite::write_atomically(&fifo, b"through the pipe", 0o644).unwrap();
    // Checked before joining: a reader of a FIFO renamed away would wait for ever.
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is still a FIFO");
    assert_eq!(reader.join().unwrap(), b"through the pipe");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
}
