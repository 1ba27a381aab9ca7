// Package setup builds a process's backends from its configuration: the backend
// registry (mock, mockfile, openai from the environment and from [backends.NAME], the
// acp:* coding agents), the tools openai agents may be given ([tools], and the tools of
// [mcp_servers], each server started when an agent first asks for one of its own tools,
// so a server that cannot start fails only the agents that want it) and the policy both
// follow (the workspace, the command allow-list, approval, the paths no agent may write).
//
// Every front door builds its backends here (through package host, which wires the rest
// of a host: the scheduler and the runtime.Service), so they all offer the same backends
// under the same policy. It sits beside the adapters it assembles and knows neither the
// runtime nor the VM; scheduling and the journal are not its concern.
package setup
