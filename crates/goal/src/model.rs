//! One model call made on behalf of a goal: refused before it is made when the run tree must
//! stop (cancelled, token/USD budget spent, wall clock out), cut off at the tree's deadline,
//! and accounted for (usage and cost recorded on the scope, a `Usage` event emitted).

use recursive_core::{ChatProvider, ChatRequest, ChatResponse, EventKind, FinishReason, ProviderError, RunScope};

/// Why a model call produced no response.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelCallError {
    /// The run tree must stop (budget, wall clock, cancellation); no call was made or it was
    /// cut off.
    #[error("stopped: {0}")]
    Stopped(FinishReason),
    /// The provider failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// Makes one model call in `scope`, checking the tree's stop reason first.
pub async fn call_model(
    provider: &dyn ChatProvider,
    request: ChatRequest,
    scope: &RunScope,
) -> Result<ChatResponse, ModelCallError> {
    if let Some(reason) = scope.stop_reason() {
        return Err(ModelCallError::Stopped(reason));
    }
    let work = provider.complete(request);
    let timed = async {
        match scope.budget().deadline() {
            Some(d) => tokio::time::timeout_at(d.into(), work).await.ok(),
            None => Some(work.await),
        }
    };
    let response = tokio::select! {
        biased;
        _ = scope.cancel_token().cancelled() => return Err(ModelCallError::Stopped(FinishReason::Cancelled)),
        r = timed => match r {
            None => return Err(ModelCallError::Stopped(FinishReason::WallClockExceeded)),
            Some(Err(e)) => {
                scope.emit(0, EventKind::Error { message: e.to_string() });
                return Err(e.into());
            }
            Some(Ok(r)) => r,
        }
    };
    scope.record_response(0, &response);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use recursive_core::{Budget, BudgetLimits, MockProvider, MockReply, NullSink, Usage};

    use super::*;

    #[tokio::test]
    async fn spent_budget_refuses_before_calling_the_provider() {
        let budget = Arc::new(Budget::new(BudgetLimits { max_tokens: Some(10), ..Default::default() }));
        let scope = RunScope::root("g", Arc::new(NullSink), budget);
        scope.record_usage(&Usage { input_tokens: 10, ..Default::default() }, None);
        let provider = MockProvider::new([MockReply::text("x")]);
        let err = call_model(&provider, ChatRequest::default(), &scope).await.unwrap_err();
        assert_eq!(err, ModelCallError::Stopped(FinishReason::TokenBudgetExceeded));
        assert_eq!(provider.request_count(), 0);
    }

    #[tokio::test]
    async fn usage_and_cost_are_recorded_on_the_scope() {
        let scope = RunScope::detached("g");
        let provider = MockProvider::new([MockReply::text("x")]);
        call_model(&provider, ChatRequest::default(), &scope).await.unwrap();
        assert_eq!(scope.usage().total(), 15);
    }
}
