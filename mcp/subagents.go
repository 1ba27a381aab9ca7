package mcp

// addSubagentTools adds the sub-agent tools (spawn, await, run, status, cancel, approve,
// tools: SPEC §8). They live in their own files and register here.
func (s *Server) addSubagentTools() {}
