// Package testkit is a fake LLM engine behind OpenAI's chat-completions and Responses
// APIs and Anthropic's Messages API: the engine that luft's benchmarks and backend tests
// run against. It models what a scheduler in front of an engine must care about, and
// nothing else: slots, queues, prefill and decode time, a prefix cache, and provider
// rate limits with their real headers. Its ground-truth log, not the client's view, is
// where benchmark metrics come from.
//
// # Two ways to use it
//
// In process, on a VirtualClock (tier T1, deterministic): build an Engine with
// Config.Clock set to NewVirtualClock(start), Submit requests with a callback, and drive
// time with clock.Step (jump to the next event) or AdvanceTo; callbacks run on the
// driver's goroutine, nothing sleeps, and the same inputs always give the same log.
//
// Over HTTP (tier T2, wall clock): NewServer(engine).Start("127.0.0.1:0") serves
// POST /v1/chat/completions, /v1/responses and /v1/messages (each streamed or not),
// POST /v1/messages/count_tokens, GET /v1/models, /health and /metrics on a loopback
// address; requests take their modelled latency in real time. Each replica also has its
// own base URL (Server.ReplicaURL) so a client-side router can choose. The binary
// cmd/luft-fake-engine wraps this.
//
// # Three wires, one engine
//
// The Responses and Messages endpoints translate their request into a ChatRequest and
// submit it like a chat completion, so latency, slots, the prefix cache, rate limits,
// 429s, tool rules and the log apply unchanged; the answer is translated back into the
// wire's own shape. Record.Wire says which wire a request came on (chat, responses,
// messages) and Record.ID is its id there (chatcmpl-fake…, resp_fake…, msg_fake…).
// Refusals made before the engine (a body that does not parse, an unknown
// previous_response_id, a missing max_tokens) are not logged, as the chat endpoint's
// are not.
//
//   - Responses API (Codex CLI, the Agents SDK, the openai SDKs' responses.create):
//     instructions become a system message; input is a string or items (messages,
//     function_call, function_call_output, custom_tool_call[_output]; reasoning and
//     other items are ignored); function tools, and the function tools of a namespace
//     tool (Codex's MCP servers), are offered under their names, other tool types
//     ignored; max_output_tokens is max_tokens; text.format is the response format.
//     previous_response_id prepends the stored conversation (its input and output
//     items, without its instructions) of one of the last 4096 responses, unless it
//     was sent with store false; an unknown one is a 400 previous_response_not_found.
//     The answer is a response object whose output holds a message item
//     (output_text) and/or function_call items (fc_…, call_id call_…, and the
//     namespace of a namespaced tool); cut at max_output_tokens it is "incomplete".
//     A stream sends response.created and response.in_progress when prefill ends,
//     then per item response.output_item.added, its content_part.added,
//     output_text.delta… and output_text.done, content_part.done (a function call:
//     function_call_arguments.delta and .done), response.output_item.done, and last
//     response.completed (or response.incomplete) with the usage; every event has a
//     sequence_number, and there is no [DONE]. Errors and 429s are OpenAI's, with the
//     same headers as on the chat endpoint.
//   - Messages API (Claude Code, the Anthropic SDKs): max_tokens is required (400
//     "max_tokens: Field required") and is a cap: the length is what it would be
//     without one (DefaultMaxTokens, or drawn with Lengths), cut at it with
//     stop_reason max_tokens; it is still what the rate limiter reserves. system (a
//     string or text blocks) is a system message; an assistant's tool_use blocks are
//     tool calls, a user's tool_result blocks tool messages (text sent beside them
//     joins the last one, so the user message a ToolRule matched stays the turn's);
//     each tool_use must be answered by the next message, as Anthropic insists.
//     Custom tools are offered (input_schema as parameters), server tools ignored;
//     tool_choice auto, any, tool and none map to auto, required, the function and
//     none. The answer is a message with text and tool_use blocks (toolu_…, derived
//     from the engine's call ids), stop_reason end_turn, tool_use or max_tokens, and
//     usage whose input_tokens are the uncached prompt tokens and
//     cache_read_input_tokens the cached ones. A stream sends message_start (output
//     tokens 1) and a ping when prefill ends, then per block content_block_start,
//     text_delta or input_json_delta deltas and content_block_stop, then
//     message_delta (stop_reason, usage) and message_stop. Its rate-limit headers are
//     Anthropic's whatever the provider model (see WithWire), with request-id; errors
//     are Anthropic's ({"type":"error","error":{"type":...}}): invalid_request_error,
//     not_found_error, request_too_large (413), rate_limit_error (429 with retry-after
//     in whole seconds), overloaded_error (529, the engine's full queue).
//     count_tokens answers the prompt tokens a call would have, neither limited nor
//     logged; GET /v1/models answers in Anthropic's shape to a request with an
//     anthropic-version header.
//
// # The model
//
//   - Replicas × Slots. A request runs on one replica; when all its slots are busy it
//     waits in that replica's FIFO queue (optionally bounded: 503 beyond MaxWaiting).
//     Unpinned requests go to the least-loaded replica (or round-robin).
//   - Latency. prefill = PrefillOverhead + uncached prompt tokens × PrefillPerToken +
//     cached tokens × CachedPrefillPerToken; decode = completion tokens × DecodePerToken,
//     times an optional load factor. The first token comes at the end of prefill.
//   - Prefix cache, per replica: an LRU of chained block hashes (BlockSize tokens per
//     block, CacheTokens capacity). At slot assignment the prompt's longest cached run of
//     leading blocks counts as cached (never the whole prompt: the last block is always
//     recomputed) and skips its prefill; the prompt's blocks enter the cache when prefill
//     ends. Only prompts are cached, not generated tokens; since an assistant message is
//     rendered the way the generation prompt ends, a conversation's previous prompt is
//     a prefix of its next one.
//   - Tokens are an estimate: white-space separated words, one token per started four
//     runes; each message adds one role-marker token, tool declarations come first. The
//     same counter (CountTokens) is exported so tests can state expectations.
//   - Output: max_completion_tokens, else max_tokens, else DefaultMaxTokens tokens of
//     deterministic words (exactly that many tokens); finish_reason "stop". With
//     Config.Lengths the length is drawn instead, heavy-tailed (lognormal, seeded per
//     conversation) and capped by the request's max tokens when it sends one. With a
//     json_schema response_format the content is a valid instance of the schema, with
//     json_object it is {}; usage.completion_tokens is then the content's token count.
//   - Scripted tool calls (ToolRule): when the last user message matches a rule the
//     answer is the rule's tool_calls (deterministic ids derived from the conversation);
//     after Rounds tool-call turns it answers text. Offered calls only tools the request
//     offers; FirstOffered makes the calls alternatives, so one rule drives any agent's
//     shell tool (exec_command for Codex, Bash for Claude Code). A forced tool_choice
//     calls that tool with {} when no rule applies; tool_choice "none" never calls tools.
//   - Rate limits, engine-wide (Limits): a request bucket (RPM) and a token bucket (TPM),
//     refilled continuously or reset in fixed windows. A request is charged at arrival
//     prompt + max_tokens (prompt + output without max_tokens), as OpenAI's limiter
//     does; with Limits.OutputAtEnd, the prompt at arrival and the actual output when it
//     ends. A refused request gets 429 with an OpenAI error body (type "requests" or
//     "tokens", code rate_limit_exceeded), retry-after (whole seconds, rounded up) and
//     retry-after-ms, and it is still charged one request (NoChargeRejected turns that
//     off; ChargeRejectedTokens also charges its tokens). A continuous bucket can go at
//     most one window into debt. A request larger than the token limit is refused
//     without a retry-after: waiting cannot help.
//   - Provider models (Limits.Provider): the above is ProviderClassic. ProviderOpenAI
//     reserves prompt + max_tokens (the model's max output without it) and enforces over
//     one-second windows too; ProviderStrict refuses unless prompt + the actual
//     completion fits, billing the output as it streams; ProviderAnthropic has separate
//     input- and output-token buckets and Anthropic's headers only; ProviderFixedWindow
//     is a gateway's fixed windows; ProviderSilent limits without any header. Each
//     model's 429s carry the retry headers its provider sends, not always both. See
//     Provider for the rules, and NetFloor for the least time a log's charges need.
//   - Every response, 200 or not, carries x-ratelimit-{limit,remaining,reset}-{requests,
//     tokens} (resets as OpenAI durations: 450ms, 7.66s, 2m59.56s, rounded up) and,
//     with Limits.Anthropic, anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}
//     (RFC 3339, whole seconds rounded up). Remaining counts are after this request. On
//     the Messages wire only the anthropic-ratelimit-* ones are sent.
//   - Ground truth: one Record per request once it is final — its wire, arrival,
//     replica, queue wait, start, first token, finish, prefill and decode time, prompt,
//     cached, output and charged tokens, status (200, 429, 400, 404, 503, 499 when
//     abandoned), caller, run and class. Engine.Log returns them in arrival order; Config.Log streams them
//     as JSON lines in completion order.
//
// Not modelled: KV memory pressure on running requests (no preemption), priorities
// (vLLM's priority field is accepted and ignored), chunked prefill, per-key limits,
// Anthropic's cache reads being free of its input limit, injected 5xx failures.
//
// Rules: the server binds loopback only unless Server.AllowNonLoopback is set; the
// package never touches the network otherwise, never sleeps on a VirtualClock, and
// takes time only from its Clock.
package testkit
