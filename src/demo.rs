//! The built-in demo backend: a small MCP server that speaks revision
//! 2025-11-25, written with the official Rust SDK (`rmcp`).
//!
//! This module owns [`DemoServer`] (its tools, resources, prompt, completion
//! and logging level) and [`run_stdio`], which serves it over stdin/stdout.
//! Several tools make the server-to-client requests a legacy server may send
//! (elicitation, sampling, roots), so the gateway's bridging can be tried
//! against a real SDK server without installing one.

// rmcp marks sampling, roots and logging deprecated because revision
// 2026-07-28 deprecates them; this server speaks 2025-11-25, where they are
// current features.
#![allow(deprecated)]

use std::{
    borrow::Cow,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use rmcp::{
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{
        CallToolResult, ClientResult, CompleteRequestParams, CompleteResult, CompletionInfo,
        ContentBlock, CreateMessageRequest, CreateMessageRequestParams, ElicitRequest,
        ElicitRequestParams, ElicitationAction, ElicitationSchema, ErrorData as McpError,
        GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
        InitializeResult, ListPromptsResult, ListResourcesResult, ListRootsRequest, LoggingLevel,
        LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam, Prompt,
        PromptArgument, PromptMessage, ProtocolVersion, ReadResourceRequestParams,
        ReadResourceResponse, ReadResourceResult, Reference, Resource, ResourceContents, Role,
        SamplingMessage, ServerCapabilities, ServerRequest, SetLevelRequestParams,
    },
    service::{RequestContext, RoleServer, ServiceError},
    tool, tool_handler, tool_router, Peer, ServerHandler, ServiceExt,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Why [`run_stdio`] stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The `initialize` handshake failed.
    #[error("demo server failed to start: {0}")]
    Start(Box<rmcp::service::ServerInitializeError>),
    /// The task serving the connection panicked or was aborted.
    #[error("demo server stopped abnormally: {0}")]
    Serve(#[from] tokio::task::JoinError),
}

/// Serves [`DemoServer`] over stdin/stdout until the client disconnects.
pub async fn run_stdio() -> Result<(), DemoError> {
    // Lines as long as the gateway writes (rmcp's default is a quarter of that).
    let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .with_max_line_length(crate::config::STDIO_MAX_LINE_BYTES);
    let running = DemoServer::new()
        .serve(transport)
        .await
        .map_err(|error| DemoError::Start(Box::new(error)))?;
    running.waiting().await?;
    Ok(())
}

const TEXT_URI: &str = "demo://text";
const ABOUT_URI: &str = "demo://about";
const GREET_PROMPT: &str = "greet";
const NAME_SUGGESTIONS: &[&str] = &["Ada", "Alan", "Barbara", "Grace", "Linus", "Margaret"];
const MAX_COUNTDOWN: u32 = 100;
const MAX_DELAY_MS: u64 = 10_000;

/// A legacy (2025-11-25) MCP server with a handful of friendly tools, two
/// text resources and one prompt.
///
/// Every request it sends to the client goes through the peer of the request
/// being handled, so on Streamable HTTP it travels on that request's stream.
#[derive(Clone)]
pub struct DemoServer {
    tool_router: ToolRouter<Self>,
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
}

impl Default for DemoServer {
    fn default() -> Self {
        Self::new()
    }
}

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

#[tool_router]
impl DemoServer {
    /// Creates a server with no logging level set yet.
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
            log_level: Arc::new(Mutex::new(None)),
        }
    }

    /// The level the client last asked for with `logging/setLevel`, if any.
    pub fn log_level(&self) -> Option<LoggingLevel> {
        *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `notifications/message` to `peer` unless the client asked for a
    /// higher level. Until the client sets a level, everything is sent.
    /// Returns whether the message was sent.
    pub async fn send_log(
        &self,
        peer: &Peer<RoleServer>,
        level: LoggingLevel,
        data: serde_json::Value,
    ) -> Result<bool, ServiceError> {
        if self
            .log_level()
            .is_some_and(|minimum| severity(level) < severity(minimum))
        {
            return Ok(false);
        }
        peer.notify_logging_message(
            LoggingMessageNotificationParam::new(level, data).with_logger("demo"),
        )
        .await?;
        Ok(true)
    }

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

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DemoServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_completions()
                .enable_prompts()
                .enable_resources()
                .enable_tools()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .with_server_info(
            Implementation::new("mrtr-gateway-demo", env!("CARGO_PKG_VERSION"))
                .with_title("mrtr-gateway demo backend"),
        )
        .with_instructions(
            "A demo server: try echo, add, countdown, ask_name, summarize and list_roots.",
        )
    }

    // A 2025-11-25 server: never agree to a revision it does not implement.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    // `server/discover` does not exist in 2025-11-25.
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        Err(McpError::method_not_found::<
            rmcp::model::DiscoverRequestMethod,
        >())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(request.level);
        Ok(())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(TEXT_URI, "text")
                .with_title("A short note")
                .with_description("A plain-text note from the demo server.")
                .with_mime_type("text/plain"),
            Resource::new(ABOUT_URI, "about")
                .with_title("About this server")
                .with_description("What the demo server can do.")
                .with_mime_type("text/markdown"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let contents = match request.uri.as_str() {
            TEXT_URI => ResourceContents::text("Hello from the demo backend.", TEXT_URI)
                .with_mime_type("text/plain"),
            ABOUT_URI => ResourceContents::text(
                "# Demo backend\n\nA small MCP server (revision 2025-11-25) with tools that \
                 echo, add, count down, ask for your name, summarize and list roots.",
                ABOUT_URI,
            )
            .with_mime_type("text/markdown"),
            _ => return Err(resource_not_found(&request.uri)),
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(vec![greet_prompt()]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != GREET_PROMPT {
            return Err(McpError::invalid_params(
                format!("unknown prompt: {}", request.name),
                Some(json!({ "name": request.name })),
            ));
        }
        let name = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("name"))
            .and_then(serde_json::Value::as_str)
            .filter(|name| !name.trim().is_empty())
            .ok_or_else(|| McpError::invalid_params("the greet prompt needs a name", None))?;
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("Please greet {name} warmly, in one sentence."),
        )])
        .with_description(format!("A greeting for {name}"))
        .into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let values = match &request.r#ref {
            Reference::Prompt(prompt)
                if prompt.name == GREET_PROMPT && request.argument.name == "name" =>
            {
                suggest_names(&request.argument.value)
            }
            _ => Vec::new(),
        };
        let completion = CompletionInfo::with_all_values(values)
            .map_err(|error| McpError::internal_error(error, None))?;
        Ok(CompleteResult::new(completion))
    }
}

fn greet_prompt() -> Prompt {
    Prompt::new(
        GREET_PROMPT,
        Some("Write a warm greeting for someone."),
        Some(vec![PromptArgument::new("name")
            .with_description("Who to greet")
            .with_required(true)]),
    )
    .with_title("Greet someone")
}

fn suggest_names(prefix: &str) -> Vec<String> {
    let prefix = prefix.to_lowercase();
    NAME_SUGGESTIONS
        .iter()
        .filter(|name| name.to_lowercase().starts_with(&prefix))
        .map(|name| (*name).to_owned())
        .collect()
}

/// The legacy "resource not found" error (-32002) with the URI as data.
fn resource_not_found(uri: &str) -> McpError {
    McpError::resource_not_found(
        format!("resource not found: {uri}"),
        Some(json!({ "uri": uri })),
    )
}

/// Numeric order of syslog severities, lowest first.
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
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

/// Why a request to the client produced no usable answer.
pub enum AskError {
    /// The tool call that needed the answer was cancelled.
    Cancelled,
    /// The client answered with a JSON-RPC error.
    Refused(McpError),
    /// The request never got an answer.
    Failed(ServiceError),
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

/// Sends `request` to the client through the peer of the call being handled
/// and waits for the answer. If that call is cancelled first, the request is
/// withdrawn with `notifications/cancelled`.
pub async fn ask_client(
    context: &RequestContext<RoleServer>,
    request: ServerRequest,
) -> Result<ClientResult, AskError> {
    let handle = context
        .peer
        .send_cancellable_request(request, Default::default())
        .await
        .map_err(AskError::Failed)?;
    let id = handle.id.clone();
    tokio::select! {
        answer = handle.await_response() => match answer {
            Ok(answer) => Ok(answer),
            Err(ServiceError::McpError(error)) => Err(AskError::Refused(error)),
            Err(error) => Err(AskError::Failed(error)),
        },
        () = context.ct.cancelled() => {
            let notice = rmcp::model::CancelledNotificationParam::new(
                Some(id),
                Some("the tool call was cancelled".to_owned()),
            );
            // Best effort: the call is already over for the client.
            let _ = context.peer.notify_cancelled(notice).await;
            Err(AskError::Cancelled)
        }
    }
}
