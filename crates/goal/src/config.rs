//! Configuration of goal pursuit: the constraints checked before each goal, the cycle
//! detection thresholds, and the options of every model call.

use std::time::Duration;

use recursive_core::ChatOptions;
use serde::{Deserialize, Serialize};

/// Limits checked before each goal starts. A violation ends that goal with status
/// `constrained`; the rest of the tree still synthesizes what it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Constraints {
    /// Deepest goal allowed (the objective is depth 0).
    pub max_depth: u32,
    /// Wall clock for the whole pursuit.
    #[serde(with = "recursive_core::serde_secs")]
    pub max_time: Duration,
    /// USD the whole pursuit may spend (infinite: no USD cap, for a model whose price is unknown).
    pub max_cost_usd: f64,
    /// Goals the whole pursuit may start (the objective counts as one).
    pub max_goals: usize,
}

impl Default for Constraints {
    fn default() -> Self {
        Self { max_depth: 15, max_time: Duration::from_secs(3600), max_cost_usd: 10.0, max_goals: 100 }
    }
}

/// Which text-similarity score detects a near-duplicate of an ancestor goal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SimilarityMetric {
    /// Normalized Levenshtein similarity (strict; the default).
    #[default]
    Levenshtein,
    /// Jaro-Winkler similarity (favours shared prefixes).
    JaroWinkler,
}

/// How a [`crate::GoalPursuer`] behaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GoalConfig {
    /// Constraints checked before each goal.
    pub constraints: Constraints,
    /// A goal whose normalised text scores at least this against a goal on its stack is a
    /// cycle.
    pub similarity_threshold: f64,
    /// The text-similarity score used.
    pub similarity_metric: SimilarityMetric,
    /// With an embedder configured, a cosine similarity at least this is a cycle.
    pub semantic_threshold: f64,
    /// Options of every model call (model name, temperature...). `response_format` is set
    /// per phase when `native_structured_output` is on.
    pub options: ChatOptions,
    /// Ask providers for their native JSON-schema output mode.
    pub native_structured_output: bool,
    /// How many more times a phase asks the model after an unusable JSON reply.
    pub json_retries: u32,
    /// Most sub-goals one decomposition may have (extra ones are dropped and logged).
    pub max_subgoals: usize,
    /// Goals of one layer run at most this many at once; the achieved check runs after each
    /// such batch, so a smaller number lets a flat plan stop earlier.
    pub layer_concurrency: usize,
    /// Characters a whole prompt (system and user) may have; evidence and results are
    /// shortened, visibly, to fit.
    pub prompt_chars: usize,
    /// Characters a goal's result may have; a longer action output is digested by the model.
    pub result_chars: usize,
    /// How many more times a goal judged not achieved is decomposed for its remaining gaps.
    pub gap_rounds: u32,
}

impl GoalConfig {
    /// How deep the run tree of a pursuit goes: one level per goal, plus one for the work a
    /// goal delegates and two for what that work runs.
    pub fn run_tree_depth(&self) -> u32 {
        self.constraints.max_depth + 3
    }
}

impl Default for GoalConfig {
    fn default() -> Self {
        Self {
            constraints: Constraints::default(),
            similarity_threshold: 0.9,
            similarity_metric: SimilarityMetric::default(),
            semantic_threshold: 0.95,
            options: ChatOptions::default(),
            native_structured_output: true,
            json_retries: 1,
            max_subgoals: 8,
            layer_concurrency: 4,
            prompt_chars: 24_000,
            result_chars: 2_000,
            gap_rounds: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_limits() {
        let c = Constraints::default();
        assert_eq!((c.max_depth, c.max_time.as_secs(), c.max_goals), (15, 3600, 100));
        assert!((c.max_cost_usd - 10.0).abs() < f64::EPSILON);
    }

    #[test]
    fn config_reads_partial_json_with_time_in_seconds() {
        let c: GoalConfig = serde_json::from_str(r#"{"constraints": {"max_time": 1.5, "max_goals": 7}}"#).unwrap();
        assert_eq!(c.constraints.max_time, Duration::from_millis(1500));
        assert_eq!(c.constraints.max_goals, 7);
        assert_eq!(c.constraints.max_depth, 15);
        assert!((c.similarity_threshold - 0.9).abs() < f64::EPSILON);
    }
}
