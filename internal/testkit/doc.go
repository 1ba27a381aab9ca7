// Package testkit is a fake OpenAI-compatible chat-completions engine: the engine that
// luft's benchmarks and backend tests run against. It models what a scheduler in front
// of an engine must care about, and nothing else: slots, queues, prefill and decode
// time, a prefix cache, and provider rate limits with their real headers. Its ground-truth
// log, not the client's view, is where benchmark metrics come from.
//
// # Two ways to use it
//
// In process, on a VirtualClock (tier T1, deterministic): build an Engine with
// Config.Clock set to NewVirtualClock(start), Submit requests with a callback, and drive
// time with clock.Step (jump to the next event) or AdvanceTo; callbacks run on the
// driver's goroutine, nothing sleeps, and the same inputs always give the same log.
//
// Over HTTP (tier T2, wall clock): NewServer(engine).Start("127.0.0.1:0") serves
// POST /v1/chat/completions (streamed or not), GET /v1/models, /health and /metrics on a
// loopback address; requests take their modelled latency in real time. Each replica also
// has its own base URL (Server.ReplicaURL) so a client-side router can choose. The binary
// cmd/luft-fake-engine wraps this.
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
//     after Rounds tool-call turns it answers text. A forced tool_choice calls that tool
//     with {} when no rule applies; tool_choice "none" never calls tools.
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
//     (RFC 3339, whole seconds rounded up). Remaining counts are after this request.
//   - Ground truth: one Record per request once it is final — arrival, replica, queue
//     wait, start, first token, finish, prefill and decode time, prompt, cached, output
//     and charged tokens, status (200, 429, 400, 404, 503, 499 when abandoned), caller,
//     run and class. Engine.Log returns them in arrival order; Config.Log streams them
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
