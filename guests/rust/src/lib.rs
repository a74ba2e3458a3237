//! Write `agenthost` agents, their tools and durable orchestrations as
//! WebAssembly components.
//!
//! A component is built from plain Rust values: [`Agent`]s (a name and
//! instructions for the model) and [`Tool`]s (ordinary functions whose JSON
//! Schema is derived from their argument type). [`export!`] wires them to the
//! host's WIT contract, so a crate never touches the generated bindings.
//!
//! ```no_run
//! use agenthost_guest::{Agent, Component, Tool};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Lookup {
//!     /// The city to report on.
//!     city: String,
//! }
//!
//! #[derive(Serialize)]
//! struct Report {
//!     city: String,
//!     temperature_c: f64,
//! }
//!
//! fn get_weather(args: Lookup) -> Result<Report, String> {
//!     Ok(Report { city: args.city, temperature_c: 21.5 })
//! }
//!
//! fn component() -> Component {
//!     Component::new()
//!         .agent(
//!             Agent::new("weather")
//!                 .description("Answers questions about the weather")
//!                 .instructions("Use get_weather to answer.")
//!                 .tool("get_weather"),
//!         )
//!         .tool(Tool::new("get_weather", "Current weather for a city", get_weather))
//! }
//!
//! agenthost_guest::export!(component);
//! ```
//!
//! Build it with `cargo build --target wasm32-wasip2 --release` (crate type
//! `cdylib`) and copy the `.wasm` into the host's components directory.

mod component;
pub mod http;
mod orchestration;
mod tool;

pub use component::{Agent, Component};
pub use orchestration::{
    ActivityCall, AgentCall, Context, Orchestration, Pending, RemoteAgentCall, RetryPolicy,
    Session, Task, TaskError,
};
pub use tool::{Approval, Tool, ToolError};

// Lets the generated bindings name this crate by its public path, the same path
// the `export!` macro uses from the component's crate.
extern crate self as agenthost_guest;

/// Bindings generated from `wit/` (the `agenthost-sdk-component` world: the
/// component, its agents' settings and its orchestrations' input schemas). Public so that
/// [`export!`] can reach them from the component's crate; not part of the API.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "agenthost-sdk-component",
        pub_export_macro: true,
        export_macro_name: "export_bindings",
        default_bindings_module: "agenthost_guest::bindings",
        runtime_path: "agenthost_guest::__private::wit_bindgen::rt",
    });
}

/// Writes a log line through the host, tagged with this component's name.
pub fn log(level: Level, message: &str) {
    bindings::agenthost::host::logging::log(level, message);
}

/// Severity of a [`log`] line.
pub use bindings::agenthost::host::logging::Level;

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;

    use crate::bindings::exports::agenthost::host::component as wit;
    use crate::Component;

    pub fn describe(component: &Component) -> wit::Manifest {
        component.manifest()
    }

    pub fn invoke(
        component: &Component,
        name: &str,
        arguments: &str,
    ) -> Result<String, wit::ActivityError> {
        component.invoke(name, arguments)
    }

    pub fn run_orchestration(
        component: &Component,
        name: &str,
        input: &str,
    ) -> Result<String, String> {
        component.run_orchestration(name, input)
    }

    pub fn agent_settings(
        component: &Component,
    ) -> Vec<crate::bindings::exports::agenthost::host::agent_settings::Settings> {
        component.agent_settings()
    }

    pub fn input_schemas(
        component: &Component,
    ) -> Vec<crate::bindings::exports::agenthost::host::orchestration_inputs::InputSchema> {
        component.input_schemas()
    }
}

/// Exports a component built by `$build` (a `fn() -> Component`) to the host.
///
/// Use it once per crate, at the top level. The component is built once per
/// wasm instance, on the first call from the host.
#[macro_export]
macro_rules! export {
    ($build:path) => {
        #[doc(hidden)]
        struct __AgenthostExports;

        impl __AgenthostExports {
            fn component() -> &'static $crate::Component {
                static COMPONENT: ::std::sync::OnceLock<$crate::Component> =
                    ::std::sync::OnceLock::new();
                COMPONENT.get_or_init($build)
            }
        }

        impl $crate::bindings::exports::agenthost::host::component::Guest for __AgenthostExports {
            fn describe() -> $crate::bindings::exports::agenthost::host::component::Manifest {
                $crate::__private::describe(Self::component())
            }

            fn invoke_activity(
                name: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::string::String,
                $crate::bindings::exports::agenthost::host::component::ActivityError,
            > {
                $crate::__private::invoke(Self::component(), &name, &arguments)
            }

            fn run_orchestration(
                name: ::std::string::String,
                input: ::std::string::String,
            ) -> ::std::result::Result<::std::string::String, ::std::string::String> {
                $crate::__private::run_orchestration(Self::component(), &name, &input)
            }
        }

        impl $crate::bindings::exports::agenthost::host::agent_settings::Guest for __AgenthostExports {
            fn agent_settings() -> ::std::vec::Vec<
                $crate::bindings::exports::agenthost::host::agent_settings::Settings,
            > {
                $crate::__private::agent_settings(Self::component())
            }
        }

        impl $crate::bindings::exports::agenthost::host::orchestration_inputs::Guest
            for __AgenthostExports
        {
            fn input_schemas() -> ::std::vec::Vec<
                $crate::bindings::exports::agenthost::host::orchestration_inputs::InputSchema,
            > {
                $crate::__private::input_schemas(Self::component())
            }
        }

        $crate::bindings::export_bindings!(__AgenthostExports with_types_in $crate::bindings);
    };
}
