//! What running a task produced: shared by the task kinds (`tasks`,
//! `remote_call`) and the orchestrator that stores it.

pub enum Outcome {
    Done(Result<String, String>),
    /// The host is stopping, or the task cannot run now: it stays in the
    /// store and runs again later.
    Interrupted,
}
