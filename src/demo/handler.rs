//! Everything [`DemoServer`] answers apart from tool calls (which its tool
//! router serves): the server's info and revisions, the logging level, two
//! text resources, the `greet` prompt and completion of its `name`.

use std::borrow::Cow;

use rmcp::{
    model::{
        CompleteRequestParams, CompleteResult, CompletionInfo, ErrorData as McpError,
        GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
        InitializeResult, ListPromptsResult, ListResourcesResult, PaginatedRequestParams, Prompt,
        PromptArgument, PromptMessage, ProtocolVersion, ReadResourceRequestParams,
        ReadResourceResponse, ReadResourceResult, Reference, Resource, ResourceContents, Role,
        ServerCapabilities, SetLevelRequestParams,
    },
    service::{RequestContext, RoleServer},
    tool_handler, ServerHandler,
};
use serde_json::json;

use super::DemoServer;

const TEXT_URI: &str = "demo://text";
const ABOUT_URI: &str = "demo://about";
const GREET_PROMPT: &str = "greet";
const NAME_SUGGESTIONS: &[&str] = &["Ada", "Alan", "Barbara", "Grace", "Linus", "Margaret"];

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
        self.set_log_level(request.level);
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
