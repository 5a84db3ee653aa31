//! Pure core of Madeira: the validated flow model, the flow-spec parser and validator,
//! the node/run state machine (one transition table), run admission, dependency rules, the run
//! planner and the retry policy. No I/O, no async runtime: everything here is a
//! function of its inputs, so it is property-tested in isolation.

pub mod admit;
pub mod bizdate;
pub mod deadline_risk;
pub mod estate;
pub mod expr;
pub mod foreach;
pub mod keyexpr;
pub mod keys;
pub mod model;
pub mod plan;
pub mod prompt;
pub mod retry;
pub mod rootcause;
pub mod schedule;
pub mod spec;
pub mod sqltext;
pub mod state;
pub mod subflow;
pub mod text;
pub mod timebound;

pub use model::{
    ConcurrencyDef, DepKind, ExecutorDef, FallbackThen, FlowDef, ManualDef, MessageTriggerDef, Need,
    NodeAction, NodeDef, OnOverlap, OnPaused, TriggerDef, XxlBlock, XxlDef, XxlRoute,
};
pub use plan::{Action, Command, NodeChange, NodeRt, Plan, PlanCtx, Refusal, RunChange, RunSnapshot};
pub use retry::RetryPolicy;
pub use state::{Cause, NodeState, RunCause, RunState};
