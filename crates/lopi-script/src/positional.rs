//! bpftrace's positional parameters: `$1`, `$2`, .. are the words given after the script
//! (`lopi trace FILE 10 sshd -- PROG`), `$#` their count. They are written into the text
//! before it is parsed, so that a record keeps the script as it ran: a number as itself,
//! another word as a string literal (`str($2)` then reads as that string), a missing one as
//! `0`. Text in strings and comments is left alone.

/// `source` with its positional parameters replaced by `params`.
pub fn substitute(source: &str, params: &[String]) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => {
                out.push(c);
                let mut escaped = false;
                for (_, c) in chars.by_ref() {
                    out.push(c);
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        _ => escaped = false,
                    }
                }
            }
            '/' if source[at..].starts_with("//") || source[at..].starts_with("/*") => {
                let end = if source[at..].starts_with("//") { source[at..].find('\n') } else { source[at + 2..].find("*/").map(|e| e + 4) };
                let end = end.map_or(source.len(), |e| at + e);
                out.push_str(&source[at..end]);
                while chars.peek().is_some_and(|&(i, _)| i < end) {
                    chars.next();
                }
            }
            '$' if chars.peek().is_some_and(|&(_, d)| d == '#') => {
                chars.next();
                out.push_str(&params.len().to_string());
            }
            '$' if chars.peek().is_some_and(|&(_, d)| d.is_ascii_digit()) => {
                let mut digits = String::new();
                while let Some(&(_, d)) = chars.peek().filter(|(_, d)| d.is_ascii_digit()) {
                    digits.push(d);
                    chars.next();
                }
                let param = digits.parse::<usize>().ok().and_then(|n| n.checked_sub(1)).and_then(|i| params.get(i));
                out.push_str(&literal(param.map(String::as_str)));
            }
            _ => out.push(c),
        }
    }
    out
}

/// A parameter as the script reads it: an integer as written, other text as a string literal.
fn literal(param: Option<&str>) -> String {
    match param {
        None => "0".to_string(),
        Some(p) if p.parse::<i64>().is_ok() || (p.starts_with("0x") && i64::from_str_radix(&p[2..], 16).is_ok()) => p.to_string(),
        Some(p) => {
            let escaped: String = p.chars().flat_map(|c| match c {
                '"' | '\\' => vec!['\\', c],
                '\n' => vec!['\\', 'n'],
                '\t' => vec!['\\', 't'],
                c => vec![c],
            }).collect();
            format!("\"{escaped}\"")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::substitute;

    #[test]
    fn parameters_become_literals_outside_strings_and_comments() {
        let params = ["10".to_string(), "ss\"hd".to_string()];
        let src = "func:f /arg0 > $1 && str(arg1) == str($2)/ { printf(\"$1 %d\\\"$2\\n\", $#); @[$3] = count(); } // $1\n/* $2 */";
        let want = "func:f /arg0 > 10 && str(arg1) == str(\"ss\\\"hd\")/ { printf(\"$1 %d\\\"$2\\n\", 2); @[0] = count(); } // $1\n/* $2 */";
        assert_eq!(substitute(src, &params), want);
        assert_eq!(substitute("$10 $x", &[]), "0 $x");
        assert_eq!(substitute("$1", &["0x1f".to_string()]), "0x1f");
    }
}
