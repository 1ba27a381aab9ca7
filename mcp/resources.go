package mcp

func (s *Server) addResources() {}
