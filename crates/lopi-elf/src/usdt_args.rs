//! A USDT marker's argument string: one specifier per argument, separated by spaces, each
//! `[-]N@OPERAND` (N bytes, `-` for signed; without `N@`, 8 bytes unsigned) with the operand
//! in AT&T syntax as the compiler wrote it for the `asm` that made the marker: `%eax`, `$5`,
//! `-16(%rbp)`, `8(%rax,%rdx,4)`, `counter(%rip)`, `counter+8(%rip)`, `table(,%rax,8)`.
//!
//! The operand is where the value is *at the marker's `nop`*: the compiler put it there for the
//! `asm`, so a memory operand is memory the program can read at that instruction.

/// One argument: its size in bytes (1, 2, 4 or 8), signedness and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtArg {
    pub size: u8,
    pub signed: bool,
    pub location: Location,
}

/// A general register, by its number in x86's encoding (rax 0, rcx 1, rdx 2, rbx 3, rsp 4,
/// rbp 5, rsi 6, rdi 7, r8..r15 8..15); `high_byte` for `%ah`, `%ch`, `%dh`, `%bh`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    pub number: u8,
    pub high_byte: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `$5`.
    Constant(i64),
    /// `%eax`: the register's low `size` bytes.
    Register(Reg),
    /// `[SYMBOL][+disp](base, index, scale)`: a symbol's address (`counter(%rip)`, or a
    /// non-PIE program's absolute `table(,%rax,8)`) plus `disp` plus the registers.
    Memory { symbol: Option<String>, disp: i64, base: Option<Reg>, index: Option<(Reg, u8)> },
}

/// The specifiers of `text`, or the first one that cannot be read and why.
pub fn parse(text: &str) -> Result<Vec<UsdtArg>, String> {
    text.split_ascii_whitespace().map(|spec| arg(spec).ok_or_else(|| format!("argument `{spec}` is not understood"))).collect()
}

fn arg(spec: &str) -> Option<UsdtArg> {
    let (size, operand) = match spec.split_once('@') {
        // An `@` inside an operand (`foo@GOTPCREL`) comes after a `(`, `%` or `$`.
        Some((size, operand)) if !size.contains(['(', '%', '$']) => (size.parse::<i8>().ok()?, operand),
        _ => (8, spec),
    };
    if ![1, 2, 4, 8].contains(&size.unsigned_abs()) {
        return None;
    }
    Some(UsdtArg { size: size.unsigned_abs(), signed: size < 0, location: location(operand)? })
}

fn location(operand: &str) -> Option<Location> {
    if let Some(value) = operand.strip_prefix('$') {
        return Some(Location::Constant(integer(value)?));
    }
    if let Some(name) = operand.strip_prefix('%') {
        return Some(Location::Register(register(name)?));
    }
    // disp(base[, index[, scale]]), disp a number, a symbol with an offset, or empty; or disp
    // alone, an absolute address.
    let (disp, inner) = match operand.strip_suffix(')') {
        Some(memory) => memory.split_once('(')?,
        None => (operand, ""),
    };
    let (symbol, disp) = match disp {
        "" => (None, 0),
        d if d.starts_with(|c: char| c.is_ascii_digit() || c == '-') => (None, integer(d)?),
        d => symbol_and_offset(d).map(|(name, offset)| (Some(name.to_string()), offset))?,
    };
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    // Relative to the instruction: only a symbol's address says where.
    if parts[..] == ["%rip"] {
        return symbol.is_some().then_some(Location::Memory { symbol, disp, base: None, index: None });
    }
    let reg = |text: &str| -> Option<Option<Reg>> {
        match text {
            "" => Some(None),
            t => Some(Some(register(t.strip_prefix('%')?).filter(|r| !r.high_byte)?)),
        }
    };
    let (base, index) = match parts[..] {
        [base] => (reg(base)?, None),
        [base, index] => (reg(base)?, Some((reg(index)??, 1))),
        [base, index, scale] => (reg(base)?, Some((reg(index)??, scale.parse::<u8>().ok().filter(|s| [1, 2, 4, 8].contains(s))?))),
        _ => return None,
    };
    Some(Location::Memory { symbol, disp, base, index })
}

/// `foo`, `foo+8`, `foo-8` (a symbol name is not a number).
fn symbol_and_offset(text: &str) -> Option<(&str, i64)> {
    let split = text.find(['+', '-']).unwrap_or(text.len());
    let (name, offset) = text.split_at(split);
    let named = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '.') && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.$".contains(c));
    let offset = match offset {
        "" => 0,
        o => integer(o.strip_prefix('+').unwrap_or(o))?,
    };
    named.then_some((name, offset))
}

/// A decimal or `0x` integer, maybe negative.
fn integer(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let value = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    } as i64;
    Some(if negative { value.wrapping_neg() } else { value })
}

/// A register's name without its `%`, any width.
pub fn register(name: &str) -> Option<Reg> {
    const BASE: [&str; 8] = ["ax", "cx", "dx", "bx", "sp", "bp", "si", "di"];
    const BYTE: [&str; 8] = ["al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil"];
    const HIGH: [&str; 4] = ["ah", "ch", "dh", "bh"];
    let low = |number: usize| Some(Reg { number: number as u8, high_byte: false });
    if let Some(i) = HIGH.iter().position(|&r| r == name) {
        return Some(Reg { number: i as u8, high_byte: true });
    }
    if let Some(i) = BYTE.iter().position(|&r| r == name) {
        return low(i);
    }
    if let Some(rest) = name.strip_prefix('r').or_else(|| name.strip_prefix('e')) {
        if let Some(i) = BASE.iter().position(|&r| r == rest) {
            return low(i);
        }
    }
    if let Some(i) = BASE.iter().position(|&r| r == name) {
        return low(i);
    }
    // r8..r15 and their r8d, r8w, r8b (r8l) parts.
    let digits = name.strip_prefix('r')?;
    let digits = digits.strip_suffix(['d', 'w', 'b', 'l']).unwrap_or(digits);
    match digits.parse::<usize>() {
        Ok(n @ 8..=15) => low(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(number: u8) -> Reg {
        Reg { number, high_byte: false }
    }

    #[test]
    fn every_kind_of_specifier() {
        let args = parse("-4@%eax 8@%rdi 4@$5 8@-16(%rbp) -8@8(%rax,%rdx,4) 8@foo(%rip) 2@bar-2(%rip) 1@%ah -1@%r9b %r12 8@(%rsp) 4@$-3 8@0x10(,%rcx,8) 8@table(,%rax,8) 4@counter").unwrap();
        let memory = |symbol: Option<&str>, disp, base, index| Location::Memory { symbol: symbol.map(String::from), disp, base, index };
        let want = [
            (4, true, Location::Register(reg(0))),
            (8, false, Location::Register(reg(7))),
            (4, false, Location::Constant(5)),
            (8, false, memory(None, -16, Some(reg(5)), None)),
            (8, true, memory(None, 8, Some(reg(0)), Some((reg(2), 4)))),
            (8, false, memory(Some("foo"), 0, None, None)),
            (2, false, memory(Some("bar"), -2, None, None)),
            (1, false, Location::Register(Reg { number: 0, high_byte: true })),
            (1, true, Location::Register(reg(9))),
            (8, false, Location::Register(reg(12))),
            (8, false, memory(None, 0, Some(reg(4)), None)),
            (4, false, Location::Constant(-3)),
            (8, false, memory(None, 16, None, Some((reg(1), 8)))),
            (8, false, memory(Some("table"), 0, None, Some((reg(0), 8)))),
            (4, false, memory(Some("counter"), 0, None, None)),
        ];
        assert_eq!(args.len(), want.len());
        for (got, (size, signed, location)) in args.iter().zip(want) {
            assert_eq!(*got, UsdtArg { size, signed, location });
        }
        assert_eq!(parse("").unwrap(), []);
    }

    #[test]
    fn what_is_not_understood_is_said() {
        for bad in ["3@%eax", "8@%xmm0", "8@%fs:16", "8@16(%rip)", "8@(%rax,%rbx,3)", "8@$x", "8@f(o)", "-16@%rax", "8@(%ah)", "8@(%rax", "8@foo+(%rip)"] {
            assert!(parse(bad).unwrap_err().contains("not understood"), "{bad}");
        }
    }
}
