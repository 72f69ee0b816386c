//! The runner served runs run on, built from a harness: its agent, RLM and goal pursuer as the
//! kinds' defaults and its runnables by name. `serve` and `mcp` answer requests with it; `worker`
//! runs the runs `serve --enqueue` queued with it.

use std::sync::Arc;

use recursive_core::Runnable;
use recursive_serve::Served;

use crate::ConfigError;

/// The runner of served runs over a built harness; a runnable named as a built-in model is
/// refused, and so is a shell tool the sandbox cannot confine.
pub(crate) fn served_by(harness: &recursive_harness::Harness) -> anyhow::Result<Served> {
    if let Some(name) =
        harness.runnables().names().iter().find(|n| recursive_serve::conversation::MODELS.contains(&n.as_str()))
    {
        return Err(ConfigError(format!("--agent {name}: the name is taken by a built-in model")).into());
    }
    harness.check_shell_sandbox(None)?;
    let goal_config = recursive_goal::GoalConfig { options: harness.options(), ..Default::default() };
    let depth = harness.limits().max_depth.max(goal_config.run_tree_depth());
    let main = harness.agent("main");
    let own_tools = main.tools().names();
    let agent: Arc<dyn Runnable> = Arc::new(main);
    let rlm: Arc<dyn Runnable> = Arc::new(harness.rlm(None)?);
    let goal: Arc<dyn Runnable> = Arc::new(harness.pursuer(goal_config));
    Ok(Served::new(agent, rlm, goal, harness.runnables().clone()).with_max_depth(depth).with_own_tools(own_tools))
}
