// Package proxy is luft's door for agents that keep their own tool loop (the openai SDKs,
// the Agents SDK, LangGraph, Codex, Claude Code): point their base URL at it and every
// turn they send is admitted by the same scheduler luft's own runs use — continuations
// first, fair shares across callers, rate-limit budgets learned from the upstream's
// headers and respected before a 429, replica affinity, fallback lanes — and shows up as
// a run in luft list, luft status and the dashboard.
//
// Wires. It speaks three: OpenAI chat completions (POST /v1/chat/completions) and the
// Responses API (POST /v1/responses), passed to upstreams of type openai, and Anthropic
// Messages (POST /v1/messages, with POST /v1/messages/count_tokens passed through
// unscheduled), passed to upstreams of type anthropic. Each request goes to an upstream
// of its own wire; what differs between wires (reading a request's size and tool-call
// ids, an answer's usage, the event that closes a stream, the shape of errors) is in
// wire.go, and everything else is shared. GET /v1/models lists the models of the openai
// upstreams, or, to a client that sends anthropic-version, those of the anthropic ones in
// Anthropic's shape; DELETE /v1/runs/{id} ends a run. The upstream of a request is the
// configured backend of its wire whose model the request names (a backend without a
// model takes any model when it is its wire's default, or its wire's only backend).
// Requests and responses pass through unchanged: the raw body goes upstream with its
// query string (it is only rewritten when the scheduler routes a turn to a fallback
// backend that serves another model), the upstream's status, headers and body come back
// as sent, and a stream is forwarded line by line as it arrives. A 429 or 5xx is retried
// inside luft as the scheduler decides (after the server's wait, at the turn's rank), so
// a client sees an upstream error only once luft has given up.
//
// Runs. A request names its run with x-luft-run-id; without one, a request that echoes
// the ids an earlier response handed out (chat tool_call ids, Responses call_ids and
// previous_response_id, Messages tool_use ids) belongs to that response's run, and any
// other request begins a new run. Run ids are scoped by caller
// (x-luft-caller), so one caller cannot add turns to another's run by naming its id. A
// turn whose last input is a tool result is a continuation: it ranks by the admission
// of the turn that began its tool loop, ahead of new work. x-luft-class (interactive or
// batch) sets the class. DELETE /v1/runs/{id} ends a run at once; a run with no turn
// for Options.IdleTTL ends by itself. The tables of runs and tool_call ids are bounded
// (least recently used runs end first). Each run is stored as a luft run named
// proxy:<caller> (proxy:<model> without a caller) with an agent_started and agent_done
// event per turn (tokens, cost, the wait in luft's queue); the response says which run
// a turn joined in the x-luft-run header.
//
// Records. The runs are recorded through Options.Service, as the external runs of the
// process's runtime (runtime.Service.OpenExternal): every write is durable when it
// returns, and the writes of many runs share the store's commits. A run's first turn is
// sent upstream once the run is stored (list and status show it while the turn is
// upstream); a later turn's agent_started is stored while the turn is on its way, and
// nothing of the answer goes to the client before it is. A turn is answered only once
// its agent_done is stored: a whole answer (up to 8 MiB) is held with its status until
// then, and a stream passes through but for the event that closes it (chat's data:
// [DONE], Responses' response.completed, Messages' message_stop). A state dir that cannot
// record a turn (full, read-only) gets the client a 503 luft_state_unwritable naming the
// state dir and the fix, in place of the answer or, as an error event, of the closing
// event when only the turn's end failed; the
// runtime tells its watcher (the daemon's status, see Service.NotifyUnrecorded).
//
// Auth. The client's Authorization (or x-api-key) header goes upstream unless the
// backend's config names a key (api_key_env), which then replaces it: as Authorization:
// Bearer for an openai upstream, as x-api-key for an anthropic one. A client's credentials are meant
// for the upstream its request names, at the origins (scheme, host and port) of that
// upstream's base URL and replicas: a turn the scheduler routes to a fallback at another
// origin carries only the client's descriptive headers (Content-Type, User-Agent,
// X-Stainless-*, x-luft-* and the like: see forwardOtherHost) and the fallback's own
// key, and when the fallback has none it is not sent: the client gets a 502
// fallback_without_key naming the fallback and api_key_env. A fallback at one of the
// upstream's origins gets the client's headers as the upstream does. When
// Options.Token is set (a proxy listening beyond loopback), each request must carry it
// as x-luft-token (or as Authorization: Bearer or x-api-key, which are then not sent
// upstream). Keys
// and tokens are never logged nor forwarded to anyone but the upstream they belong to.
//
// Hostile input is refused with an error body in the wire's shape (OpenAI's, or
// Anthropic's on /v1/messages): bodies over Options.MaxBody (413), malformed JSON or a
// request without model or its input (400), an unknown model
// (404, naming the configured ones), x-luft-* header values that are too long or invalid
// (400); an upstream that cannot be reached is a 502 naming the backend. A client that
// goes away cancels its upstream request and frees its slot.
package proxy
