//! Numbers from flags, checked against the ranges the program can honour where clap parses
//! them (`value_parser = flags::secs`...): a value out of range is a usage error (exit 2) that
//! names the flag and the range, before anything starts — never a panic or a run that fails
//! later. Durations are at most [`MAX_SECS`], so a deadline `now + d` is always representable.
//! Limits that a configuration file may set too are checked again where both meet (the
//! harness), with the same bounds.

use std::time::Duration;

/// The longest duration a flag takes: a year.
pub const MAX_SECS: u64 = 365 * 24 * 3600;
/// The most things run at once (runs, jobs, sub-calls).
pub const MAX_CONCURRENCY: usize = 1024;
/// The most runs a server lets wait for a slot.
pub const MAX_QUEUED: usize = 100_000;
/// The largest request body a server takes, in MiB.
pub const MAX_BODY_MIB: usize = 4096;
/// The most attempts of a queued job.
pub const MAX_ATTEMPTS: i32 = 1000;
/// The most rows of a listing.
pub const MAX_ROWS: i64 = 100_000;
/// The deepest goal tree.
pub const MAX_GOAL_DEPTH: usize = 100;
/// The most characters a text limit takes.
pub const MAX_CHARS: usize = 100_000_000;
/// The shortest lease.
pub const MIN_LEASE: Duration = Duration::from_millis(300);

/// A number of seconds: positive, finite, at most [`MAX_SECS`] (fractions allowed).
pub fn secs(text: &str) -> Result<f64, String> {
    let secs = number(text)?;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("expected a positive number of seconds, not {text}"));
    }
    if secs > MAX_SECS as f64 {
        return Err(format!("at most {MAX_SECS} seconds (a year), not {text}"));
    }
    Ok(secs)
}

/// [`secs`] as a duration.
pub fn duration(text: &str) -> Result<Duration, String> {
    secs(text).map(Duration::from_secs_f64)
}

/// A whole number of seconds from 0 to [`MAX_SECS`].
pub fn whole_secs(text: &str) -> Result<u64, String> {
    let secs: u64 = text.trim().parse().map_err(|_| format!("expected a whole number of seconds, not {text}"))?;
    if secs > MAX_SECS {
        return Err(format!("at most {MAX_SECS} seconds (a year), not {text}"));
    }
    Ok(secs)
}

/// How many things run at once: 1 to [`MAX_CONCURRENCY`].
pub fn concurrency(text: &str) -> Result<usize, String> {
    whole_in(text, 1, MAX_CONCURRENCY)
}

/// How many runs may wait for a slot: 0 to [`MAX_QUEUED`].
pub fn queued(text: &str) -> Result<usize, String> {
    whole_in(text, 0, MAX_QUEUED)
}

/// A request body size in MiB: 1 to [`MAX_BODY_MIB`].
pub fn body_mib(text: &str) -> Result<usize, String> {
    whole_in(text, 1, MAX_BODY_MIB)
}

/// How deep a goal tree may go: 0 to [`MAX_GOAL_DEPTH`].
pub fn goal_depth(text: &str) -> Result<u32, String> {
    whole_in(text, 0, MAX_GOAL_DEPTH).map(|n| n as u32)
}

/// A number of characters: 0 to [`MAX_CHARS`].
pub fn chars(text: &str) -> Result<usize, String> {
    whole_in(text, 0, MAX_CHARS)
}

/// How many attempts a queued job may use: 1 to [`MAX_ATTEMPTS`].
pub fn attempts(text: &str) -> Result<i32, String> {
    whole_in(text, 1, MAX_ATTEMPTS as usize).map(|n| n as i32)
}

/// How many rows a listing shows: 1 to [`MAX_ROWS`].
pub fn rows(text: &str) -> Result<i64, String> {
    whole_in(text, 1, MAX_ROWS as usize).map(|n| n as i64)
}

/// A lease's time to live: [`secs`], and at least [`MIN_LEASE`] (its heartbeat goes every
/// third of it).
pub fn lease_ttl(text: &str) -> Result<Duration, String> {
    let ttl = duration(text)?;
    if ttl < MIN_LEASE {
        return Err(format!("at least {} seconds, not {text}", MIN_LEASE.as_secs_f64()));
    }
    Ok(ttl)
}

/// An amount of USD: finite and at least 0.
pub fn usd(text: &str) -> Result<f64, String> {
    let usd = number(text)?;
    if usd.is_finite() && usd >= 0.0 { Ok(usd) } else { Err(format!("expected a number of USD >= 0, not {text}")) }
}

/// A sampling temperature: 0 to 2, as every provider takes it.
pub fn temperature(text: &str) -> Result<f32, String> {
    let t = number(text)?;
    if (0.0..=2.0).contains(&t) { Ok(t as f32) } else { Err(format!("expected a temperature from 0 to 2, not {text}")) }
}

/// A fraction from 0 to 1.
pub fn fraction(text: &str) -> Result<f64, String> {
    let f = number(text)?;
    if (0.0..=1.0).contains(&f) { Ok(f) } else { Err(format!("expected a number from 0 to 1, not {text}")) }
}

fn number(text: &str) -> Result<f64, String> {
    text.trim().parse::<f64>().map_err(|_| format!("expected a number, not {text}"))
}

fn whole_in(text: &str, low: usize, high: usize) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (low..=high).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from {low} to {high}, not {text}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_positive_finite_and_at_most_a_year() {
        for bad in ["0", "-1", "NaN", "inf", "1e17", "31536001", "x", ""] {
            assert!(secs(bad).is_err(), "{bad}");
        }
        assert_eq!(secs("0.5"), Ok(0.5));
        assert_eq!(duration("31536000"), Ok(Duration::from_secs(MAX_SECS)));
        assert!(whole_secs("18446744073709551615").is_err());
        assert_eq!(whole_secs("0"), Ok(0));
    }

    #[test]
    fn counts_and_amounts_keep_to_their_ranges() {
        assert!(concurrency("0").is_err() && concurrency("18446744073709551615").is_err());
        assert_eq!(concurrency("1024"), Ok(1024));
        assert!(queued("-1").is_err());
        assert_eq!(queued("0"), Ok(0));
        assert!(body_mib("0").is_err() && body_mib("18446744073709551615").is_err());
        assert!(usd("NaN").is_err() && usd("-0.5").is_err() && usd("inf").is_err());
        assert!(temperature("NaN").is_err() && temperature("3").is_err());
        assert!(fraction("2").is_err());
        assert!(attempts("0").is_err() && attempts("-3").is_err());
        assert!(rows("-1").is_err());
        assert!(lease_ttl("0.1").is_err() && lease_ttl("1e17").is_err());
        assert_eq!(lease_ttl("30"), Ok(Duration::from_secs(30)));
    }
}
