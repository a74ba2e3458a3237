//! Tools: typed Rust functions the model can call through the host.

use std::fmt::Display;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::bindings::agenthost::host::types as wit;

type Handler = Box<dyn Fn(&str) -> Result<String, wit::ActivityError> + Send + Sync>;

/// The JSON Schema of a tool's arguments, made only when the host asks the
/// component to describe itself: every activity call and episode runs in a
/// fresh instance, which builds the component anew, and deriving every
/// tool's schema there cost more than the call itself.
fn schema_of<A: JsonSchema>() -> String {
    serde_json::to_string(&schemars::schema_for!(A))
        .unwrap_or_else(|_| String::from("{\"type\":\"object\"}"))
}

/// Whether the host may run a tool as soon as the model asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Approval {
    /// Runs when the model calls it (the default).
    #[default]
    NeverRequire,
    /// Never runs on the model's word alone.
    AlwaysRequire,
}

/// Why a tool failed; the text is what the model is shown.
pub type ToolError = String;

/// A function of the component that agents can call.
///
/// Its arguments are one Rust type: the JSON Schema the model sees is derived
/// from it (doc comments become descriptions), and the model's arguments are
/// deserialized into it before the function runs. Its result is any
/// `Serialize` value, handed back to the model as JSON.
pub struct Tool {
    name: String,
    description: String,
    schema: fn() -> String,
    approval: Approval,
    handler: Handler,
}

impl Tool {
    /// A tool named `name` that runs `f`.
    ///
    /// ```
    /// use agenthost_guest::Tool;
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Add { a: i64, b: i64 }
    /// let tool = Tool::new("add", "Adds two numbers", |x: Add| Ok::<_, String>(x.a + x.b));
    /// ```
    pub fn new<A, R, E, F>(name: impl Into<String>, description: impl Into<String>, f: F) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        R: Serialize,
        E: Display,
        F: Fn(A) -> Result<R, E> + Send + Sync + 'static,
    {
        let handler: Handler = Box::new(move |arguments: &str| {
            let args: A = serde_json::from_str(arguments)
                .map_err(|e| wit::ActivityError::InvalidArguments(e.to_string()))?;
            let result = f(args).map_err(|e| wit::ActivityError::Failed(e.to_string()))?;
            serde_json::to_string(&result).map_err(|e| {
                wit::ActivityError::Failed(format!("the result could not be serialized: {e}"))
            })
        });
        Self {
            name: name.into(),
            description: description.into(),
            schema: schema_of::<A>,
            approval: Approval::NeverRequire,
            handler,
        }
    }

    /// Sets whether the tool needs a human's approval before it runs.
    pub fn approval(mut self, approval: Approval) -> Self {
        self.approval = approval;
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn call(&self, arguments: &str) -> Result<String, wit::ActivityError> {
        (self.handler)(arguments)
    }

    pub(crate) fn to_wit(&self) -> wit::Activity {
        wit::Activity {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters_schema: (self.schema)(),
            approval: match self.approval {
                Approval::NeverRequire => wit::ApprovalMode::NeverRequire,
                Approval::AlwaysRequire => wit::ApprovalMode::AlwaysRequire,
            },
        }
    }
}
