//! The demo server's tools: `echo`, `add` and `countdown` on their own;
//! `ask_name`, `summarize` and `list_roots` through a request to the client
//! (elicitation, sampling, roots).

use std::time::Duration;

use rmcp::{
    handler::server::wrapper::Parameters,
    model::{
        CallToolResult, ClientResult, ContentBlock, CreateMessageRequest,
        CreateMessageRequestParams, ElicitRequest, ElicitRequestParams, ElicitationAction,
        ElicitationSchema, ErrorData as McpError, ListRootsRequest, LoggingLevel,
        ProgressNotificationParam, SamplingMessage, ServerRequest,
    },
    service::{RequestContext, RoleServer, ServiceError},
    tool, tool_router,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{ask_client, AskError, DemoServer};

const MAX_COUNTDOWN: u32 = 100;
const MAX_DELAY_MS: u64 = 10_000;

#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct AddArgs {
    /// The first number.
    a: f64,
    /// The second number.
    b: f64,
}

fn default_delay_ms() -> u64 {
    200
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CountdownArgs {
    /// Where to start counting down from (at most 100).
    from: u32,
    /// Pause between steps, in milliseconds (at most 10000).
    #[serde(default = "default_delay_ms")]
    delay_ms: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SummarizeArgs {
    /// The text to summarize.
    text: String,
}

#[tool_router(vis = "pub(super)")]
impl DemoServer {
    #[tool(description = "Repeat the text you send.")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(args.text)])
    }

    #[tool(description = "Add two numbers.")]
    async fn add(&self, Parameters(args): Parameters<AddArgs>) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text((args.a + args.b).to_string())])
    }

    #[tool(
        description = "Count down to zero, reporting progress at each step when the caller asks for it."
    )]
    async fn countdown(
        &self,
        Parameters(args): Parameters<CountdownArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if args.from > MAX_COUNTDOWN || args.delay_ms > MAX_DELAY_MS {
            return Err(McpError::invalid_params(
                format!("from must be at most {MAX_COUNTDOWN} and delay_ms at most {MAX_DELAY_MS}"),
                None,
            ));
        }
        let token = context.meta.get_progress_token();
        for step in 1..=args.from {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(args.delay_ms)) => {}
                () = context.ct.cancelled() => return Err(cancelled()),
            }
            if let Some(token) = &token {
                let remaining = args.from - step;
                let progress = ProgressNotificationParam::new(token.clone(), f64::from(step))
                    .with_total(f64::from(args.from))
                    .with_message(format!("{remaining}..."));
                context
                    .peer
                    .notify_progress(progress)
                    .await
                    .map_err(|error| transport_error("progress notification", &error))?;
            }
        }
        self.send_log(
            &context.peer,
            LoggingLevel::Info,
            json!({ "message": format!("countdown from {} finished", args.from) }),
        )
        .await
        .map_err(|error| transport_error("log notification", &error))?;
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "Liftoff!",
        )]))
    }

    #[tool(description = "Ask the user for their name, then greet them.")]
    async fn ask_name(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if !client_supports_form_elicitation(&context) {
            return Ok(tool_error("This client cannot ask the user questions."));
        }
        let schema = ElicitationSchema::builder()
            .required_string_with("name", |s| s.title("Your name").min_length(1))
            .build()
            .map_err(|error| McpError::internal_error(error, None))?;
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "What is your name?".to_owned(),
                requested_schema: schema,
            },
        ));
        let answer = match ask_client(&context, request).await {
            Ok(ClientResult::ElicitResult(answer)) => answer,
            Ok(_) => return Err(unexpected_answer("elicitation/create")),
            Err(error) => return error.into_tool_result("elicitation/create"),
        };
        let text = match answer.action {
            ElicitationAction::Accept => {
                let name = answer
                    .content
                    .as_ref()
                    .and_then(|content| content.get("name"))
                    .and_then(serde_json::Value::as_str)
                    .map(str::trim)
                    .filter(|name| !name.is_empty());
                match name {
                    Some(name) => format!("Hello, {name}!"),
                    None => return Ok(tool_error("The user accepted but gave no name.")),
                }
            }
            ElicitationAction::Decline => "The user declined to give their name.".to_owned(),
            ElicitationAction::Cancel => "The user cancelled the question.".to_owned(),
            _ => "The user did not answer.".to_owned(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
    }

    #[tool(description = "Summarize a text with the client's language model.")]
    async fn summarize(
        &self,
        Parameters(args): Parameters<SummarizeArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if context
            .client_capabilities()
            .and_then(|capabilities| capabilities.sampling)
            .is_none()
        {
            return Ok(tool_error("This client does not offer a language model."));
        }
        let params = CreateMessageRequestParams::new(
            vec![SamplingMessage::user_text(format!(
                "Summarize this text in one or two sentences:\n\n{}",
                args.text
            ))],
            200,
        )
        .with_system_prompt("You write short, faithful summaries.");
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        let answer = match ask_client(&context, request).await {
            Ok(ClientResult::CreateMessageResult(answer)) => answer,
            Ok(_) => return Err(unexpected_answer("sampling/createMessage")),
            Err(error) => return error.into_tool_result("sampling/createMessage"),
        };
        let text: Vec<&str> = answer
            .message
            .content
            .iter()
            .filter_map(|block| block.as_text())
            .map(|text| text.text.as_str())
            .collect();
        if text.is_empty() {
            return Ok(tool_error("The model answered without any text."));
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(
            text.join("\n"),
        )]))
    }

    #[tool(description = "List the folders the client has shared with this server.")]
    async fn list_roots(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if context
            .client_capabilities()
            .and_then(|capabilities| capabilities.roots)
            .is_none()
        {
            return Ok(tool_error("This client does not share any roots."));
        }
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        let answer = match ask_client(&context, request).await {
            Ok(ClientResult::ListRootsResult(answer)) => answer,
            Ok(_) => return Err(unexpected_answer("roots/list")),
            Err(error) => return error.into_tool_result("roots/list"),
        };
        let text = if answer.roots.is_empty() {
            "No roots are shared.".to_owned()
        } else {
            answer
                .roots
                .iter()
                .map(|root| match &root.name {
                    Some(name) => format!("{} ({name})", root.uri),
                    None => root.uri.clone(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({ "roots": answer.roots }));
        Ok(result)
    }
}

impl AskError {
    /// A client's refusal is the tool's failure; anything else is the server's.
    fn into_tool_result(self, method: &str) -> Result<CallToolResult, McpError> {
        match self {
            Self::Cancelled => Err(cancelled()),
            Self::Refused(error) => Ok(tool_error(&format!(
                "The client refused {method}: {} ({})",
                error.message, error.code.0
            ))),
            Self::Failed(error) => Err(McpError::internal_error(
                format!("{method} failed: {error}"),
                None,
            )),
        }
    }
}

/// `elicitation: {}` means form mode, so only a URL-only client is excluded.
fn client_supports_form_elicitation(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|capabilities| capabilities.elicitation)
        .is_some_and(|elicitation| elicitation.form.is_some() || elicitation.url.is_none())
}

fn tool_error(text: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn cancelled() -> McpError {
    // The client cancelled the call, so it discards this answer.
    McpError::internal_error("request cancelled", None)
}

fn transport_error(what: &str, error: &ServiceError) -> McpError {
    McpError::internal_error(format!("could not send {what}: {error}"), None)
}

fn unexpected_answer(method: &str) -> McpError {
    McpError::internal_error(
        format!("the client sent an unexpected answer to {method}"),
        None,
    )
}
