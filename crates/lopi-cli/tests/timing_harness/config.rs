//! The compiler configurations a timing fixture is built in (`LOPI_TIMING_FILTER` picks some).

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub opt: &'static str,
    pub pie: bool,
    pub cet: bool,
}

impl Config {
    pub fn name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.opt.trim_start_matches('-'),
            if self.pie { "pie" } else { "nopie" },
            if self.cet { "cet" } else { "nocet" }
        )
    }

    pub fn flags(&self) -> Vec<&'static str> {
        let mut v = vec![self.opt];
        if self.pie {
            v.extend(["-fPIE", "-pie"]);
        } else {
            v.extend(["-fno-pie", "-no-pie"]);
        }
        v.push(if self.cet { "-fcf-protection=full" } else { "-fcf-protection=none" });
        v
    }

    pub fn optimized(&self) -> bool {
        self.opt != "-O0"
    }
}

pub const fn cfg(opt: &'static str, pie: bool, cet: bool) -> Config {
    Config { opt, pie, cet }
}

/// -O0, -O2 PIE, -O2 non-PIE, -O3 PIE with CET (endbr64 at every entry).
pub const CONFIGS: [Config; 4] = [
    cfg("-O0", true, false),
    cfg("-O2", true, false),
    cfg("-O2", false, false),
    cfg("-O3", true, true),
];

pub const O2_PIE: Config = cfg("-O2", true, false);

pub fn configs() -> Vec<Config> {
    let filter = std::env::var("LOPI_TIMING_FILTER").unwrap_or_default();
    CONFIGS.into_iter().filter(|c| c.name().contains(&filter)).collect()
}
