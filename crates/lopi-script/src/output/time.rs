//! `time(FORMAT)`: the time of day when lopi prints the record, as bpftrace writes it when it
//! reads the event, by `strftime`'s conversions. In UTC: lopi's front end reads no time zone.
use std::time::{SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS: [&str; 12] = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];

/// `format` written for now.
pub(super) fn now(format: &[u8]) -> Vec<u8> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    strftime(format, secs as i64)
}

/// `format` written for `secs` after the epoch, UTC: `%H %M %S %Y %y %m %d %e %j %a %A %b
/// %B %h %p %I %T %D %F %R %s %n %t %%`; any other conversion is copied as it is.
pub(super) fn strftime(format: &[u8], secs: i64) -> Vec<u8> {
    let (days, of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil(days);
    let (hour, minute, second) = (of_day / 3600, of_day / 60 % 60, of_day % 60);
    let year_day = days - days_from_civil(year, 1, 1) + 1;
    let weekday = (days + 4).rem_euclid(7) as usize;
    let mut out = Vec::new();
    let mut bytes = format.iter();
    while let Some(&b) = bytes.next() {
        if b != b'%' {
            out.push(b);
            continue;
        }
        let Some(&conv) = bytes.next() else {
            out.push(b'%');
            break;
        };
        let text = match conv {
            b'H' => format!("{hour:02}"),
            b'M' => format!("{minute:02}"),
            b'S' => format!("{second:02}"),
            b'Y' => year.to_string(),
            b'y' => format!("{:02}", year.rem_euclid(100)),
            b'm' => format!("{month:02}"),
            b'd' => format!("{day:02}"),
            b'e' => format!("{day:2}"),
            b'j' => format!("{year_day:03}"),
            b'a' => DAYS[weekday][..3].to_string(),
            b'A' => DAYS[weekday].to_string(),
            b'b' | b'h' => MONTHS[month as usize - 1][..3].to_string(),
            b'B' => MONTHS[month as usize - 1].to_string(),
            b'p' => (if hour < 12 { "AM" } else { "PM" }).to_string(),
            b'I' => format!("{:02}", (hour + 11) % 12 + 1),
            b'T' => format!("{hour:02}:{minute:02}:{second:02}"),
            b'R' => format!("{hour:02}:{minute:02}"),
            b'D' => format!("{month:02}/{day:02}/{:02}", year.rem_euclid(100)),
            b'F' => format!("{year}-{month:02}-{day:02}"),
            b's' => secs.to_string(),
            b'n' => "\n".to_string(),
            b't' => "\t".to_string(),
            b'%' => "%".to_string(),
            other => String::from_utf8_lossy(&[b'%', other]).into_owned(),
        };
        out.extend_from_slice(text.as_bytes());
    }
    out
}

/// Year, month (1-12) and day of `days` since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Days since 1970-01-01 of a date (the inverse of [`civil`]).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

#[cfg(test)]
mod tests {
    use super::strftime;

    fn at(format: &str, secs: i64) -> String {
        String::from_utf8(strftime(format.as_bytes(), secs)).unwrap()
    }

    #[test]
    fn writes_the_utc_time_as_strftime_does() {
        // `date -u -d @1700000000 '+%H:%M:%S %Y-%m-%d %j %a %b %p %I %D %e'`
        assert_eq!(at("%H:%M:%S  ", 1_700_000_000), "22:13:20  ");
        assert_eq!(at("%Y-%m-%d %j %a %b %p %I %D %e", 1_700_000_000), "2023-11-14 318 Tue Nov PM 10 11/14/23 14");
        assert_eq!(at("%F %T %A %B %y|%%|%q|%", 0), "1970-01-01 00:00:00 Thursday January 70|%|%q|%");
        assert_eq!(at("%F %j", 951_782_400), "2000-02-29 060");
        assert_eq!(at("%F %R %s", -1), "1969-12-31 23:59 -1");
    }
}
