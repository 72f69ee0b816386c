//! A blueprint's limits under a cap: whoever binds a blueprint may cap its superstep, visit and
//! depth limits (the `blueprint` tool caps a model-written blueprint at the limits of the run
//! that wrote it, so it can only narrow them). A declared limit above its cap is refused at its
//! position — never quietly lowered, so the saved text is what runs, also when its thread is
//! resumed — and a limit left out takes the default, lowered to the cap.

use crate::blueprint::diag::Diagnostic;
use crate::blueprint::format::{At, Limits};
use crate::graph::RecursionPolicy;

/// A policy's limits by the keys a blueprint declares them with.
fn keyed(policy: &RecursionPolicy) -> [(&'static str, u32); 3] {
    [("max_supersteps", policy.max_supersteps), ("max_visits", policy.max_visits), ("max_depth", policy.max_depth)]
}

/// The policy a blueprint's `[limits]` give under `cap`, or a diagnostic for each limit above
/// the cap.
pub fn policy(limits: Option<&Limits>, cap: Option<&RecursionPolicy>) -> Result<RecursionPolicy, Vec<Diagnostic>> {
    let declared =
        limits.map(Limits::each).unwrap_or([("max_supersteps", None), ("max_visits", None), ("max_depth", None)]);
    let defaults = keyed(&RecursionPolicy::default());
    let caps = cap.map(keyed);
    let mut problems = Vec::new();
    let mut chosen = [0u32; 3];
    for (i, ((key, asked), (_, default))) in declared.into_iter().zip(defaults).enumerate() {
        let cap = caps.map(|c| c[i].1);
        chosen[i] = match (asked, cap) {
            (Some(asked), Some(cap)) if *asked.get() > cap => {
                problems.push(above_cap(key, asked, cap));
                cap
            }
            (Some(asked), _) => *asked.get(),
            (None, cap) => cap.map_or(default, |c| default.min(c)),
        };
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let [max_supersteps, max_visits, max_depth] = chosen;
    Ok(RecursionPolicy { max_supersteps, max_visits, max_depth })
}

fn above_cap(key: &str, asked: &At<u32>, cap: u32) -> Diagnostic {
    Diagnostic::new(
        format!(
            "`{key} = {}` is above this run's limit of {cap}: a blueprint can only narrow the limits of the run \
             that binds it",
            asked.get()
        ),
        asked.span(),
    )
    .help(format!("use at most {cap}, or leave `{key}` out to get {cap}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blueprint::compile::parse;

    fn limits_of(text: &str) -> Limits {
        let bp = parse(&format!("name = \"g\"\n[limits]\n{text}\n"), "g.toml").unwrap();
        bp.limits.unwrap().get().clone()
    }

    const CAP: RecursionPolicy = RecursionPolicy { max_supersteps: 100, max_visits: 25, max_depth: 8 };

    #[test]
    fn limits_under_the_cap_are_kept() {
        let p = policy(Some(&limits_of("max_supersteps = 12\nmax_visits = 3")), Some(&CAP)).unwrap();
        assert_eq!(p, RecursionPolicy { max_supersteps: 12, max_visits: 3, max_depth: 8 });
    }

    #[test]
    fn limits_above_the_cap_are_refused_each_at_its_place() {
        let problems =
            policy(Some(&limits_of("max_supersteps = 4000000000\nmax_visits = 4000000000")), Some(&CAP)).unwrap_err();
        assert_eq!(problems.len(), 2);
        assert!(problems[0].message.contains("`max_supersteps = 4000000000` is above this run's limit of 100"));
        assert!(problems[1].message.contains("`max_visits = 4000000000` is above this run's limit of 25"));
        assert_ne!(problems[0].span, problems[1].span);
    }

    #[test]
    fn limits_left_out_take_the_default_lowered_to_the_cap() {
        let cap = RecursionPolicy { max_supersteps: 7, max_visits: 500, max_depth: 3 };
        assert_eq!(
            policy(None, Some(&cap)).unwrap(),
            RecursionPolicy { max_supersteps: 7, max_visits: 25, max_depth: 3 }
        );
    }

    #[test]
    fn without_a_cap_any_limit_is_kept() {
        let p = policy(Some(&limits_of("max_supersteps = 4000000000")), None).unwrap();
        assert_eq!(p.max_supersteps, 4_000_000_000);
        assert_eq!(p.max_visits, RecursionPolicy::default().max_visits);
    }
}
