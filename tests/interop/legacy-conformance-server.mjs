#!/usr/bin/env node
// A 2025-11-25 MCP server, built on the official TypeScript SDK (1.x, legacy API), that exposes
// every tool, resource and prompt the conformance suite's server scenarios call.
//
// It plays the "unmodified legacy server" behind mrtr-gateway. It knows nothing about revision
// 2026-07-28: when a tool needs input it asks the client the 2025-11-25 way, with real
// server-to-client requests (elicitation/create, sampling/createMessage, roots/list) sent in the
// middle of the call. The gateway turns those into `input_required` rounds. The only concession
// to the gateway is the `_meta["mrtr-gateway/inputKey"]` on those requests, which names the key
// the 2026 client sees (the suite expects particular keys, e.g. `user_name`).
//
// Usage:
//   node legacy-conformance-server.mjs --stdio
//   node legacy-conformance-server.mjs --http 127.0.0.1:0
//   node legacy-conformance-server.mjs --https NAME:PORT CERT_FILE KEY_FILE
// With --http it serves stateful Streamable HTTP at /mcp (sessions, SSE responses, the GET
// stream, resumption with Last-Event-ID) on 127.0.0.1 only, and prints exactly one line,
// `LISTENING http://127.0.0.1:PORT/mcp`, once it is listening. Diagnostics go to stderr.
// With --https it serves the same over TLS on every address of its host (the container tests
// run it on a container network), answering only requests whose Host is NAME; when
// REQUIRE_BEARER is set, a request without `Authorization: Bearer $REQUIRE_BEARER` gets 401.

import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import process from 'node:process';

import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  ErrorCode,
  GetPromptRequestSchema,
  isInitializeRequest,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  LoggingLevelSchema,
  McpError,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

const SERVER_INFO = { name: 'legacy-conformance-server', version: '1.0.0' };

// Backend-chosen key for a server request, as understood by mrtr-gateway.
const INPUT_KEY = 'mrtr-gateway/inputKey';

// Neither code exists in 2025-11-25. -32002 is what 2025-11-25 servers use for an unknown
// resource; -32021 (MissingRequiredClientCapability, 2026-07-28) is what the gateway passes
// through unchanged when `data.requiredCapabilities` is present.
const RESOURCE_NOT_FOUND = -32002;
const MISSING_CLIENT_CAPABILITY = -32021;

// A 1x1 PNG and a minimal WAV file.
const PNG_BASE64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV_BASE64 = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const toolError = (t) => ({ content: [{ type: 'text', text: t }], isError: true });
const errorMessage = (e) => (e instanceof Error ? e.message : String(e));
const noArguments = { type: 'object', properties: {} };

function missingCapability(capability) {
  return new McpError(
    MISSING_CLIENT_CAPABILITY,
    `This request needs the client capability '${capability}', which the client did not declare`,
    { requiredCapabilities: { [capability]: {} } },
  );
}

// ---------------------------------------------------------------------------------------------
// Server requests made during a call. They carry the call's request id as relatedRequestId, so
// over Streamable HTTP they travel on that call's own SSE response (not the GET stream, which a
// client may not have open), and the call's abort signal, so a cancelled call withdraws them.

function callOptions(extra) {
  return { relatedRequestId: extra.requestId, signal: extra.signal };
}

function withKey(key, params) {
  return { ...params, _meta: { ...(params._meta ?? {}), [INPUT_KEY]: key } };
}

function formSchema(properties, required = Object.keys(properties)) {
  return { type: 'object', properties, required };
}

function elicit(ctx, key, message, requestedSchema) {
  return ctx.server.elicitInput(withKey(key, { mode: 'form', message, requestedSchema }), callOptions(ctx.extra));
}

function sample(ctx, key, prompt, maxTokens) {
  return ctx.server.createMessage(
    withKey(key, { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens }),
    callOptions(ctx.extra),
  );
}

function listRoots(ctx, key) {
  return ctx.server.listRoots(withKey(key, {}), callOptions(ctx.extra));
}

function clientCapabilities(ctx) {
  return ctx.server.getClientCapabilities() ?? {};
}

function requireCapability(ctx, capability) {
  if (!clientCapabilities(ctx)[capability]) throw missingCapability(capability);
}

function samplingText(result) {
  const blocks = Array.isArray(result.content) ? result.content : [result.content];
  return blocks
    .filter((b) => b?.type === 'text')
    .map((b) => b.text)
    .join(' ');
}

function describeRoots(result) {
  return result.roots.map((r) => (r.name ? `${r.name} (${r.uri})` : r.uri)).join(', ') || '(none)';
}

// Log messages honour the level the client set with logging/setLevel (all levels before that).
async function log(ctx, level, data) {
  const levels = LoggingLevelSchema.options;
  if (ctx.session.logLevel && levels.indexOf(level) < levels.indexOf(ctx.session.logLevel)) return;
  await ctx.extra.sendNotification({
    method: 'notifications/message',
    params: { level, logger: SERVER_INFO.name, data },
  });
}

// ---------------------------------------------------------------------------------------------
// Tools. Every tool has a description and an inputSchema (the suite requires both). The first
// one listed must succeed when called with `{}`.

const JSON_SCHEMA_2020_12 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: {
    address: {
      $anchor: 'addressDef',
      type: 'object',
      properties: { street: { type: 'string' }, city: { type: 'string' } },
    },
  },
  properties: {
    name: { type: 'string' },
    address: { $ref: '#/$defs/address' },
    contactMethod: { type: 'string', enum: ['phone', 'email'] },
    phone: { type: 'string' },
    email: { type: 'string' },
  },
  allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
  if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
  then: { required: ['phone'] },
  else: { required: ['email'] },
  additionalProperties: false,
};

const TOOLS = [
  {
    name: 'test_simple_text',
    description: 'Returns a simple text content block.',
    run: async () => text('This is a simple text response for testing.'),
  },
  {
    name: 'test_image_content',
    description: 'Returns an image content block (PNG).',
    run: async () => ({ content: [{ type: 'image', data: PNG_BASE64, mimeType: 'image/png' }] }),
  },
  {
    name: 'test_audio_content',
    description: 'Returns an audio content block (WAV).',
    run: async () => ({ content: [{ type: 'audio', data: WAV_BASE64, mimeType: 'audio/wav' }] }),
  },
  {
    name: 'test_embedded_resource',
    description: 'Returns an embedded text resource.',
    run: async () => ({
      content: [
        {
          type: 'resource',
          resource: {
            uri: 'test://embedded-resource',
            mimeType: 'text/plain',
            text: 'This is an embedded resource content.',
          },
        },
      ],
    }),
  },
  {
    name: 'test_multiple_content_types',
    description: 'Returns text, image and embedded resource content together.',
    run: async () => ({
      content: [
        { type: 'text', text: 'Multiple content types test:' },
        { type: 'image', data: PNG_BASE64, mimeType: 'image/png' },
        {
          type: 'resource',
          resource: {
            uri: 'test://mixed-content-resource',
            mimeType: 'application/json',
            text: JSON.stringify({ test: 'data', value: 123 }),
          },
        },
      ],
    }),
  },
  {
    name: 'test_error_handling',
    description: 'Always fails, reporting the failure as a tool result with isError.',
    run: async () => toolError('This tool intentionally returns an error for testing'),
  },
  {
    name: 'test_tool_with_progress',
    description: 'Reports progress three times (0, 50, 100 of 100) when the call has a progressToken.',
    run: async (_args, ctx) => {
      const progressToken = ctx.extra._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (progress > 0) await sleep(50);
        if (progressToken !== undefined) {
          await ctx.extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` },
          });
        }
      }
      return text('Progress tool completed.');
    },
  },
  {
    name: 'test_tool_with_logging',
    description: 'Sends three info log messages while it runs.',
    run: async (_args, ctx) => {
      await log(ctx, 'info', 'Tool execution started');
      await sleep(50);
      await log(ctx, 'info', 'Tool processing data');
      await sleep(50);
      await log(ctx, 'info', 'Tool execution completed');
      return text('Tool with logging executed successfully');
    },
  },
  {
    name: 'test_logging_tool',
    description: 'Sends one info log message, then returns at once.',
    run: async (_args, ctx) => {
      await log(ctx, 'info', 'test_logging_tool was called');
      return text('Logged one message.');
    },
  },
  {
    name: 'test_reconnection',
    description:
      'Closes its SSE response stream mid-call (Streamable HTTP only), then finishes, so the client must resume with Last-Event-ID.',
    run: async (_args, ctx) => {
      ctx.extra.closeSSEStream?.();
      await sleep(100);
      return text(
        'Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.',
      );
    },
  },
  {
    name: 'test_sampling',
    description: 'Asks the client for an LLM completion of the prompt (sampling/createMessage).',
    inputSchema: {
      type: 'object',
      properties: { prompt: { type: 'string', description: 'The prompt to send to the LLM' } },
      required: ['prompt'],
    },
    run: async (args, ctx) => {
      if (!clientCapabilities(ctx).sampling) return toolError('The client does not support sampling.');
      try {
        const result = await sample(ctx, 'sampling', String(args.prompt ?? ''), 100);
        return text(`LLM response: ${samplingText(result)}`);
      } catch (e) {
        return toolError(`Sampling failed: ${errorMessage(e)}`);
      }
    },
  },
  {
    name: 'test_elicitation',
    description: 'Asks the user for a username and an email address (elicitation/create).',
    inputSchema: {
      type: 'object',
      properties: { message: { type: 'string', description: 'The message to show the user' } },
      required: ['message'],
    },
    run: async (args, ctx) => {
      if (!clientCapabilities(ctx).elicitation) return toolError('The client does not support elicitation.');
      try {
        const result = await elicit(
          ctx,
          'user_info',
          String(args.message ?? 'Please provide your information'),
          formSchema({
            username: { type: 'string', description: "User's response" },
            email: { type: 'string', description: "User's email address" },
          }),
        );
        return text(`User response: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);
      } catch (e) {
        return toolError(`Elicitation failed: ${errorMessage(e)}`);
      }
    },
  },
  {
    name: 'test_elicitation_sep1034_defaults',
    description: 'Asks for a form whose fields all have default values (SEP-1034).',
    run: async (_args, ctx) => {
      if (!clientCapabilities(ctx).elicitation) return toolError('The client does not support elicitation.');
      try {
        const result = await elicit(
          ctx,
          'defaults',
          'Please review and update the form fields with defaults',
          formSchema(
            {
              name: { type: 'string', description: 'User name', default: 'John Doe' },
              age: { type: 'integer', description: 'User age', default: 30 },
              score: { type: 'number', description: 'User score', default: 95.5 },
              status: {
                type: 'string',
                description: 'User status',
                enum: ['active', 'inactive', 'pending'],
                default: 'active',
              },
              verified: { type: 'boolean', description: 'Verification status', default: true },
            },
            [],
          ),
        );
        return text(
          `Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`,
        );
      } catch (e) {
        return toolError(`Elicitation failed: ${errorMessage(e)}`);
      }
    },
  },
  {
    name: 'test_elicitation_sep1330_enums',
    description: 'Asks for a form with the five enum field variants (SEP-1330).',
    run: async (_args, ctx) => {
      if (!clientCapabilities(ctx).elicitation) return toolError('The client does not support elicitation.');
      try {
        const result = await elicit(
          ctx,
          'enums',
          'Please pick from the enum fields',
          formSchema(
            {
              untitledSingle: {
                type: 'string',
                description: 'Untitled single-select',
                enum: ['option1', 'option2', 'option3'],
              },
              titledSingle: {
                type: 'string',
                description: 'Titled single-select',
                oneOf: [
                  { const: 'value1', title: 'First Option' },
                  { const: 'value2', title: 'Second Option' },
                  { const: 'value3', title: 'Third Option' },
                ],
              },
              legacyEnum: {
                type: 'string',
                description: 'Legacy titled single-select',
                enum: ['opt1', 'opt2', 'opt3'],
                enumNames: ['Option One', 'Option Two', 'Option Three'],
              },
              untitledMulti: {
                type: 'array',
                description: 'Untitled multi-select',
                items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
              },
              titledMulti: {
                type: 'array',
                description: 'Titled multi-select',
                items: {
                  anyOf: [
                    { const: 'value1', title: 'First Choice' },
                    { const: 'value2', title: 'Second Choice' },
                    { const: 'value3', title: 'Third Choice' },
                  ],
                },
              },
            },
            [],
          ),
        );
        return text(
          `Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`,
        );
      } catch (e) {
        return toolError(`Elicitation failed: ${errorMessage(e)}`);
      }
    },
  },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: JSON_SCHEMA_2020_12,
    run: async (args) => text(`Received: ${JSON.stringify(args)}`),
  },
  {
    // A string parameter mirrored into an HTTP header by 2026-07-28 clients (SEP-2243). To this
    // server it is an ordinary argument.
    name: 'test_custom_header_param',
    description: 'Echoes its region argument, which 2026-07-28 clients also send as the Mcp-Param-Region header.',
    inputSchema: {
      type: 'object',
      properties: { region: { type: 'string', description: 'A region name', 'x-mcp-header': 'Region' } },
      required: ['region'],
    },
    run: async (args) => text(`region=${args.region}`),
  },
  {
    name: 'test_missing_capability',
    description:
      'Needs the client sampling capability: without it the call fails with -32021 and data.requiredCapabilities; with it, it asks for one completion.',
    run: async (_args, ctx) => {
      requireCapability(ctx, 'sampling');
      try {
        const result = await sample(ctx, 'sampling', 'Say hello.', 20);
        return text(`The client answered: ${samplingText(result)}`);
      } catch (e) {
        return toolError(`Sampling failed: ${errorMessage(e)}`);
      }
    },
  },
  {
    name: 'test_streaming_elicitation',
    description: 'Asks the user for a value (elicitation/create) in the middle of the call.',
    run: async (_args, ctx) => {
      requireCapability(ctx, 'elicitation');
      try {
        const result = await elicit(ctx, 'value', 'Please enter a value', formSchema({ value: { type: 'string' } }));
        return text(result.action === 'accept' ? `You entered: ${result.content?.value}` : `No value (${result.action}).`);
      } catch (e) {
        return toolError(`Elicitation failed: ${errorMessage(e)}`);
      }
    },
  },
  {
    name: 'test_trigger_tool_change',
    description: 'Adds or removes the tool test_dynamic_tool and notifies tools/list_changed.',
    run: async (_args, ctx) => {
      ctx.session.dynamicTool = !ctx.session.dynamicTool;
      await ctx.extra.sendNotification({ method: 'notifications/tools/list_changed' });
      return text(ctx.session.dynamicTool ? 'Added test_dynamic_tool.' : 'Removed test_dynamic_tool.');
    },
  },
  {
    name: 'test_trigger_prompt_change',
    description: 'Adds or removes the prompt test_dynamic_prompt and notifies prompts/list_changed.',
    run: async (_args, ctx) => {
      ctx.session.dynamicPrompt = !ctx.session.dynamicPrompt;
      await ctx.extra.sendNotification({ method: 'notifications/prompts/list_changed' });
      return text(ctx.session.dynamicPrompt ? 'Added test_dynamic_prompt.' : 'Removed test_dynamic_prompt.');
    },
  },

  // Tools that need input from the client. They ask with real server requests; a 2026-07-28
  // client behind mrtr-gateway sees each one as an input request under the key given here.
  {
    name: 'test_input_required_result_elicitation',
    description: "Asks for the user's name (elicitation, key user_name) and greets them.",
    run: async (_args, ctx) => {
      requireCapability(ctx, 'elicitation');
      const result = await elicit(ctx, 'user_name', 'What is your name?', formSchema({ name: { type: 'string' } }));
      return result.action === 'accept'
        ? text(`Hello, ${result.content?.name}!`)
        : text(`The user did not give a name (${result.action}).`);
    },
  },
  {
    name: 'test_input_required_result_sampling',
    description: 'Asks the client LLM for the capital of France (sampling, key capital_question).',
    run: async (_args, ctx) => {
      requireCapability(ctx, 'sampling');
      const result = await sample(ctx, 'capital_question', 'What is the capital of France?', 100);
      return text(`The model answered: ${samplingText(result)}`);
    },
  },
  {
    name: 'test_input_required_result_list_roots',
    description: "Asks for the client's roots (roots/list, key client_roots) and lists them.",
    run: async (_args, ctx) => {
      requireCapability(ctx, 'roots');
      const result = await listRoots(ctx, 'client_roots');
      return text(`Client roots: ${describeRoots(result)}`);
    },
  },
  {
    name: 'test_input_required_result_request_state',
    description: 'Asks for a confirmation (elicitation, key confirm) and reports state-ok.',
    run: async (_args, ctx) => {
      requireCapability(ctx, 'elicitation');
      const result = await elicit(ctx, 'confirm', 'Please confirm', formSchema({ ok: { type: 'boolean' } }));
      return text(`state-ok: action=${result.action}, ok=${result.content?.ok}`);
    },
  },
  {
    name: 'test_input_required_result_multiple_inputs',
    description:
      'Asks at the same time for a name (elicitation, key user_name), a greeting (sampling, key greeting) and the roots (key client_roots).',
    run: async (_args, ctx) => {
      for (const capability of ['elicitation', 'sampling', 'roots']) requireCapability(ctx, capability);
      const [name, greeting, roots] = await Promise.all([
        elicit(ctx, 'user_name', 'What is your name?', formSchema({ name: { type: 'string' } })),
        sample(ctx, 'greeting', 'Generate a greeting', 50),
        listRoots(ctx, 'client_roots'),
      ]);
      return text(
        `name=${name.action === 'accept' ? name.content?.name : `(${name.action})`}; ` +
          `greeting=${samplingText(greeting)}; roots=${describeRoots(roots)}`,
      );
    },
  },
  {
    name: 'test_input_required_result_multi_round',
    description: 'Asks two questions one after the other: a name (key step1), then a favourite colour (key step2).',
    run: async (_args, ctx) => {
      requireCapability(ctx, 'elicitation');
      const first = await elicit(ctx, 'step1', 'Step 1: What is your name?', formSchema({ name: { type: 'string' } }));
      if (first.action !== 'accept') return text(`Stopped after step 1 (${first.action}).`);
      const second = await elicit(
        ctx,
        'step2',
        'Step 2: What is your favorite color?',
        formSchema({ color: { type: 'string' } }),
      );
      if (second.action !== 'accept') return text(`Stopped after step 2 (${second.action}).`);
      return text(`${first.content?.name}'s favorite color is ${second.content?.color}.`);
    },
  },
  {
    name: 'test_input_required_result_tampered_state',
    description: 'Asks for a confirmation (elicitation, key confirm).',
    run: async (_args, ctx) => {
      requireCapability(ctx, 'elicitation');
      const result = await elicit(ctx, 'confirm', 'Please confirm', formSchema({ ok: { type: 'boolean' } }));
      return text(`Confirmed: action=${result.action}, ok=${result.content?.ok}`);
    },
  },
  {
    name: 'test_input_required_result_capabilities',
    description: 'Asks only for what the client declared: sampling, elicitation and/or roots, at the same time.',
    run: async (_args, ctx) => {
      const declared = clientCapabilities(ctx);
      const asks = [];
      if (declared.sampling) {
        asks.push(sample(ctx, 'sampling_question', 'Name a primary colour.', 20).then((r) => `sampling: ${samplingText(r)}`));
      }
      if (declared.elicitation) {
        asks.push(
          elicit(ctx, 'elicitation_question', 'What is your name?', formSchema({ name: { type: 'string' } })).then(
            (r) => `elicitation: ${r.action}`,
          ),
        );
      }
      if (declared.roots) {
        asks.push(listRoots(ctx, 'client_roots').then((r) => `roots: ${describeRoots(r)}`));
      }
      if (asks.length === 0) return text('The client declared no capability to ask with.');
      return text((await Promise.all(asks)).join('; '));
    },
  },
];

// The fixtures of the suite's tasks scenarios, as plain synchronous tools. The tasks extension
// (io.modelcontextprotocol/tasks) belongs to 2026-07-28 and cannot be offered by a 2025-11-25
// server, so these tools never create a task; they only give those scenarios something to call.
TOOLS.push(
  {
    name: 'greet',
    description: 'Greets the given name.',
    inputSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
    run: async (args) => text(`Hello, ${args.name}!`),
  },
  {
    name: 'slow_compute',
    description: 'Waits the given number of seconds, then returns.',
    inputSchema: {
      type: 'object',
      properties: { seconds: { type: 'number', minimum: 0 }, label: { type: 'string' } },
      required: ['seconds'],
    },
    run: async (args, ctx) => {
      const seconds = Math.min(Math.max(Number(args.seconds) || 0, 0), 60);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, seconds * 1000);
        ctx.extra.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      if (ctx.extra.signal.aborted) return toolError('Cancelled.');
      return text(`Computed ${args.label ?? 'result'} after ${seconds}s.`);
    },
  },
  {
    name: 'failing_job',
    description: 'Fails after about a second, reporting the failure as a tool result with isError.',
    run: async () => {
      await sleep(1000);
      return toolError('The job failed.');
    },
  },
  {
    name: 'protocol_error_job',
    description: 'Fails with a JSON-RPC internal error.',
    run: async () => {
      throw new McpError(ErrorCode.InternalError, 'The job crashed.');
    },
  },
  {
    name: 'confirm_delete',
    description: 'Asks for confirmation (elicitation, key confirm_delete) before pretending to delete a file.',
    inputSchema: { type: 'object', properties: { filename: { type: 'string' } }, required: ['filename'] },
    run: async (args, ctx) => {
      requireCapability(ctx, 'elicitation');
      const result = await elicit(
        ctx,
        'confirm_delete',
        `Delete ${args.filename}?`,
        formSchema({ confirm: { type: 'boolean' } }),
      );
      const confirmed = result.action === 'accept' && result.content?.confirm === true;
      return text(confirmed ? `Deleted ${args.filename}.` : `Kept ${args.filename}.`);
    },
  },
  {
    name: 'multi_input',
    description: 'Asks two questions at the same time (elicitation, keys first and second).',
    run: async (_args, ctx) => {
      requireCapability(ctx, 'elicitation');
      const schema = formSchema({ name: { type: 'string' }, confirm: { type: 'boolean' } }, ['name']);
      const answers = await Promise.all([
        elicit(ctx, 'first', 'First question: your name?', schema),
        elicit(ctx, 'second', 'Second question: your name?', schema),
      ]);
      return text(answers.map((a) => (a.action === 'accept' ? a.content?.name : `(${a.action})`)).join(', '));
    },
  },
  {
    name: 'test_tool_with_task',
    description: "Asks for the user's name (elicitation, key user_name), then greets them.",
    run: async (_args, ctx) => {
      requireCapability(ctx, 'elicitation');
      const result = await elicit(ctx, 'user_name', 'What is your name?', formSchema({ name: { type: 'string' } }));
      return text(result.action === 'accept' ? `Hello, ${result.content?.name}!` : `No name (${result.action}).`);
    },
  },
);

const DYNAMIC_TOOL = {
  name: 'test_dynamic_tool',
  description: 'Listed only after test_trigger_tool_change has added it.',
  run: async () => text('The dynamic tool ran.'),
};

function listedTools(session) {
  return session.dynamicTool ? [...TOOLS, DYNAMIC_TOOL] : TOOLS;
}

// ---------------------------------------------------------------------------------------------
// Resources.

const RESOURCES = [
  {
    uri: 'test://static-text',
    name: 'static-text',
    title: 'Static text resource',
    description: 'A static text resource.',
    mimeType: 'text/plain',
    read: () => ({ text: 'This is the content of the static text resource.' }),
  },
  {
    uri: 'test://static-binary',
    name: 'static-binary',
    title: 'Static binary resource',
    description: 'A static binary resource (a PNG image).',
    mimeType: 'image/png',
    read: () => ({ blob: PNG_BASE64 }),
  },
  {
    uri: 'test://watched-resource',
    name: 'watched-resource',
    title: 'Watched resource',
    description: 'A resource clients may subscribe to.',
    mimeType: 'text/plain',
    read: () => ({ text: 'Watched resource content' }),
  },
];

const TEMPLATE = {
  uriTemplate: 'test://template/{id}/data',
  name: 'template-data',
  title: 'Template data',
  description: 'JSON data for any id.',
  mimeType: 'application/json',
};
const TEMPLATE_PATTERN = /^test:\/\/template\/([^/]+)\/data$/;

function readResource(uri) {
  const fixed = RESOURCES.find((r) => r.uri === uri);
  if (fixed) return { contents: [{ uri, mimeType: fixed.mimeType, ...fixed.read() }] };
  const match = TEMPLATE_PATTERN.exec(uri);
  if (match) {
    const id = decodeURIComponent(match[1]);
    return {
      contents: [
        { uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) },
      ],
    };
  }
  throw new McpError(RESOURCE_NOT_FOUND, `Resource not found: ${uri}`, { uri });
}

// ---------------------------------------------------------------------------------------------
// Prompts.

const user = (content) => ({ role: 'user', content });

function requireArguments(args, names) {
  const missing = names.filter((n) => typeof args[n] !== 'string');
  if (missing.length > 0) {
    throw new McpError(ErrorCode.InvalidParams, `Missing required argument(s): ${missing.join(', ')}`);
  }
}

const PROMPTS = [
  {
    name: 'test_simple_prompt',
    description: 'A prompt without arguments.',
    get: async () => ({ messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })] }),
  },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt with two required arguments.',
    arguments: [
      { name: 'arg1', description: 'First test argument', required: true },
      { name: 'arg2', description: 'Second test argument', required: true },
    ],
    get: async (args) => {
      requireArguments(args, ['arg1', 'arg2']);
      return {
        messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` })],
      };
    },
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt that embeds the resource it is given.',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
    get: async (args) => {
      requireArguments(args, ['resourceUri']);
      return {
        messages: [
          user({
            type: 'resource',
            resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
          }),
          user({ type: 'text', text: 'Please process the embedded resource above.' }),
        ],
      };
    },
  },
  {
    name: 'test_prompt_with_image',
    description: 'A prompt with an image.',
    get: async () => ({
      messages: [
        user({ type: 'image', data: PNG_BASE64, mimeType: 'image/png' }),
        user({ type: 'text', text: 'Please analyze the image above.' }),
      ],
    }),
  },
  {
    name: 'test_input_required_result_prompt',
    description: 'Asks the user for context (elicitation, key user_context) while the prompt is built.',
    get: async (_args, ctx) => {
      requireCapability(ctx, 'elicitation');
      const result = await elicit(
        ctx,
        'user_context',
        'What context should the prompt use?',
        formSchema({ context: { type: 'string' } }),
      );
      const context = result.action === 'accept' ? result.content?.context : `(none: ${result.action})`;
      return {
        description: 'A prompt built from the context the user gave.',
        messages: [user({ type: 'text', text: `Use this context: ${context}` })],
      };
    },
  },
];

const DYNAMIC_PROMPT = {
  name: 'test_dynamic_prompt',
  description: 'Listed only after test_trigger_prompt_change has added it.',
  get: async () => ({ messages: [user({ type: 'text', text: 'The dynamic prompt.' })] }),
};

function listedPrompts(session) {
  return session.dynamicPrompt ? [...PROMPTS, DYNAMIC_PROMPT] : PROMPTS;
}

// ---------------------------------------------------------------------------------------------
// Completion.

const COMPLETIONS = {
  'ref/prompt:test_prompt_with_arguments:arg1': ['test', 'testValue1', 'testing', 'example'],
  'ref/prompt:test_prompt_with_arguments:arg2': ['test', 'testValue2', 'sample'],
  'ref/resource:test://template/{id}/data:id': ['1', '2', '3', '123'],
};

function complete({ ref, argument }) {
  const name = ref.type === 'ref/prompt' ? ref.name : ref.uri;
  const candidates = COMPLETIONS[`${ref.type}:${name}:${argument.name}`] ?? [];
  const values = candidates.filter((v) => v.startsWith(argument.value));
  return { completion: { values, total: values.length, hasMore: false } };
}

// ---------------------------------------------------------------------------------------------
// One Server per session: over stdio the process is the session, over HTTP each Mcp-Session-Id.

function createServer() {
  const session = { logLevel: undefined, dynamicTool: false, dynamicPrompt: false, subscriptions: new Set() };
  const server = new Server(SERVER_INFO, {
    capabilities: {
      tools: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
      prompts: { listChanged: true },
      logging: {},
      completions: {},
    },
    instructions: 'A 2025-11-25 server exposing the fixtures of the MCP conformance suite.',
  });
  const context = (extra) => ({ server, session, extra });

  server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    session.logLevel = request.params.level;
    return {};
  });

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: listedTools(session).map(({ name, description, inputSchema }) => ({
      name,
      description,
      inputSchema: inputSchema ?? noArguments,
    })),
  }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name, arguments: args } = request.params;
    const tool = listedTools(session).find((t) => t.name === name);
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
    return tool.run(args ?? {}, context(extra));
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: RESOURCES.map(({ read: _read, ...resource }) => resource),
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: [TEMPLATE] }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => readResource(request.params.uri));
  // A subscribed resource changes 100 ms later (on the subscribing session, as legacy updates
  // are session-scoped): what a listen through the gateway hears as a resource update.
  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    const { uri } = request.params;
    session.subscriptions.add(uri);
    setTimeout(() => {
      if (session.subscriptions.has(uri)) server.sendResourceUpdated({ uri }).catch(() => {});
    }, 100);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    session.subscriptions.delete(request.params.uri);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: listedPrompts(session).map(({ get: _get, ...prompt }) => prompt),
  }));
  server.setRequestHandler(GetPromptRequestSchema, async (request, extra) => {
    const { name, arguments: args } = request.params;
    const prompt = listedPrompts(session).find((p) => p.name === name);
    if (!prompt) throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${name}`);
    return prompt.get(args ?? {}, context(extra));
  });

  server.setRequestHandler(CompleteRequestSchema, async (request) => complete(request.params));

  return server;
}

// ---------------------------------------------------------------------------------------------
// Streamable HTTP.

// Events kept per session so that a client can resume a broken SSE stream with Last-Event-ID.
function createEventStore() {
  const streams = new Map(); // streamId -> [{ eventId, message }]
  let counter = 0;
  const streamOf = (eventId) => {
    const cut = eventId.lastIndexOf('::');
    return cut > 0 ? eventId.slice(0, cut) : undefined;
  };
  return {
    async storeEvent(streamId, message) {
      const eventId = `${streamId}::${++counter}`;
      if (!streams.has(streamId)) streams.set(streamId, []);
      streams.get(streamId).push({ eventId, message });
      return eventId;
    },
    async getStreamIdForEventId(eventId) {
      const streamId = streamOf(eventId);
      return streamId !== undefined && streams.has(streamId) ? streamId : undefined;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const streamId = streamOf(lastEventId);
      const events = streams.get(streamId) ?? [];
      const from = events.findIndex((e) => e.eventId === lastEventId);
      for (const { eventId, message } of events.slice(from + 1)) {
        // Priming events have no message to replay.
        if (Object.keys(message).length > 0) await send(eventId, message);
      }
      return streamId;
    },
  };
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);
const MAX_BODY_BYTES = 4 * 1024 * 1024;

function hostnameOf(authority) {
  return authority.replace(/:\d+$/, '').toLowerCase();
}

// DNS-rebinding protection: only loopback Host names, and no foreign Origin.
function loopbackOnly(req) {
  if (!LOOPBACK_HOSTS.has(hostnameOf(req.headers.host ?? ''))) return false;
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  const match = /^https?:\/\/([^/]+)$/i.exec(origin);
  return match !== null && LOOPBACK_HOSTS.has(hostnameOf(match[1]));
}

function sendJsonError(res, status, code, message, id = null) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', id, error: { code, message } }));
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new Error('body too large'));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

// tls: undefined for --http (loopback only), or { name, cert, key } for --https.
async function serveHttp(listen, tls) {
  const match = (tls ? /^([A-Za-z0-9.-]+):(\d{1,5})$/ : /^(127\.0\.0\.1):(\d{1,5})$/).exec(listen ?? '');
  if (!match) {
    process.stderr.write(
      tls
        ? '--https takes NAME:PORT\n'
        : '--http takes 127.0.0.1:PORT (this server binds the loopback address only)\n',
    );
    process.exit(2);
  }
  const requiredBearer = tls ? process.env.REQUIRE_BEARER : undefined;
  const allowedHost = (req) => {
    if (!tls) return loopbackOnly(req);
    return hostnameOf(req.headers.host ?? '') === match[1] && req.headers.origin === undefined;
  };
  const sessions = new Map(); // Mcp-Session-Id -> { server, transport }

  async function handle(req, res) {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (path !== '/mcp') {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('Not found\n');
      return;
    }
    if (!allowedHost(req)) {
      sendJsonError(res, 403, -32000, 'Forbidden: Host or Origin is not this server');
      return;
    }
    if (requiredBearer && req.headers.authorization !== `Bearer ${requiredBearer}`) {
      sendJsonError(res, 401, -32000, 'Unauthorized: a bearer token is required');
      return;
    }
    const sessionId = req.headers['mcp-session-id'];
    if (sessionId !== undefined) {
      const existing = sessions.get(sessionId);
      if (!existing) {
        sendJsonError(res, 404, -32001, 'Session not found');
        return;
      }
      let body;
      if (req.method === 'POST') {
        try {
          body = JSON.parse(await readBody(req));
        } catch {
          sendJsonError(res, 400, ErrorCode.ParseError, 'Parse error');
          return;
        }
      }
      await existing.transport.handleRequest(req, res, body);
      return;
    }
    if (req.method !== 'POST') {
      sendJsonError(res, 400, -32000, 'Bad Request: Mcp-Session-Id header is required');
      return;
    }
    let body;
    try {
      body = JSON.parse(await readBody(req));
    } catch {
      sendJsonError(res, 400, ErrorCode.ParseError, 'Parse error');
      return;
    }
    if (!isInitializeRequest(body)) {
      sendJsonError(res, 400, -32000, 'Bad Request: Mcp-Session-Id header is required', body?.id ?? null);
      return;
    }
    const server = createServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: createEventStore(),
      retryInterval: 1000,
      onsessioninitialized: (id) => {
        sessions.set(id, { server, transport });
      },
      onsessionclosed: (id) => {
        sessions.delete(id);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId !== undefined) sessions.delete(transport.sessionId);
    };
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  }

  const onRequest = (req, res) => {
    handle(req, res).catch((e) => {
      process.stderr.write(`request failed: ${errorMessage(e)}\n`);
      if (!res.headersSent) sendJsonError(res, 500, ErrorCode.InternalError, 'Internal error');
      else res.end();
    });
  };
  const httpServer = tls
    ? https.createServer({ cert: readFileSync(tls.cert), key: readFileSync(tls.key) }, onRequest)
    : http.createServer(onRequest);

  const shutdown = async () => {
    httpServer.close();
    httpServer.closeAllConnections();
    await Promise.allSettled([...sessions.values()].map(({ server }) => server.close()));
    process.exit(0);
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);

  httpServer.on('error', (e) => {
    process.stderr.write(`cannot listen on ${listen}: ${errorMessage(e)}\n`);
    process.exit(1);
  });
  httpServer.listen(Number(match[2]), tls ? '0.0.0.0' : match[1], () => {
    const { port } = httpServer.address();
    process.stdout.write(`LISTENING ${tls ? 'https' : 'http'}://${match[1]}:${port}/mcp\n`);
  });
}

// ---------------------------------------------------------------------------------------------
// stdio. stdout carries the protocol, so nothing else may be written to it.

async function serveStdio() {
  const server = createServer();
  const exit = async () => {
    await server.close().catch(() => {});
    process.exit(0);
  };
  process.stdin.on('end', exit);
  // The client may stop reading before calls still in flight have answered (EPIPE); the
  // session is over then, so leave quietly instead of crashing on the unhandled error.
  process.stdout.on('error', () => process.exit(0));
  process.on('SIGTERM', exit);
  process.on('SIGINT', exit);
  await server.connect(new StdioServerTransport());
}

const [mode, value, cert, key] = process.argv.slice(2);
if (mode === '--stdio') {
  await serveStdio();
} else if (mode === '--http') {
  await serveHttp(value);
} else if (mode === '--https' && cert && key) {
  await serveHttp(value, { cert, key });
} else {
  process.stderr.write(
    'usage: legacy-conformance-server.mjs --stdio | --http 127.0.0.1:PORT | --https NAME:PORT CERT KEY\n',
  );
  process.exit(2);
}
