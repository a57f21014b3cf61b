//! Shell globs over function and system-call names: `*`, `?`, `[abc]`, `[a-z]`, `[!a]`.
//! Resolvers match their names with [`glob_match`], so that the checker and whatever installs
//! the probes agree on what a point covers.

/// True when `glob` has a wildcard, i.e. names a set rather than one name.
pub fn is_glob(glob: &str) -> bool {
    glob.contains(['*', '?', '['])
}

/// True when `name` matches all of `glob`. An unclosed `[` matches itself. Linear in practice:
/// only the last `*` is ever backtracked to.
pub fn glob_match(glob: &str, name: &str) -> bool {
    let glob: Vec<char> = glob.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut g, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match glob.get(g) {
            Some('*') => {
                star = Some((g + 1, n));
                g += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => class(&glob[g..], name[n]),
            Some(&c) => (c == name[n]).then_some(1),
            None => None,
        };
        match (step, star) {
            (Some(len), _) => {
                g += len;
                n += 1;
            }
            (None, Some((after, from))) => {
                g = after;
                n = from + 1;
                star = Some((after, from + 1));
            }
            (None, None) => return false,
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

/// Whether `c` is in the class at the start of `glob` (`[...]`): `Some(length of the class)` if
/// so. An unclosed class is a literal `[`.
fn class(glob: &[char], c: char) -> Option<usize> {
    let Some(close) = glob.iter().skip(1).position(|&x| x == ']').map(|p| p + 1) else {
        return (c == '[').then_some(1);
    };
    let body = &glob[1..close];
    let (negated, body) = match body.first() {
        Some('!' | '^') => (true, &body[1..]),
        _ => (false, body),
    };
    let mut found = false;
    let mut i = 0;
    while i < body.len() {
        if i + 2 < body.len() && body[i + 1] == '-' {
            found |= (body[i]..=body[i + 2]).contains(&c);
            i += 3;
        } else {
            found |= body[i] == c;
            i += 1;
        }
    }
    (found != negated).then_some(close + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_like_a_shell() {
        assert!(glob_match("sqlite3_*", "sqlite3_step"));
        assert!(!glob_match("sqlite3_*", "sqlite_step"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("re?d", "read"));
        assert!(glob_match("[rw]*", "write") && !glob_match("[rw]*", "open"));
        assert!(glob_match("f[a-c]o", "fbo") && !glob_match("f[!a-c]o", "fbo"));
        assert!(glob_match("f[^x]o", "foo"));
        assert!(glob_match("a[", "a["));
        assert!(glob_match("**x", "abx"));
        assert!(!is_glob("malloc") && is_glob("m*") && is_glob("[ab]"));
    }
}
