-- tools-demo.lua — agents that use tools, and a conversation that goes on.
--
-- An openai agent given `tools` runs its own loop: it asks for a tool, luft runs it and
-- sends the result back, and so on until the agent answers. Every model turn of that loop
-- passes the scheduler. The built-in tools (read_file, list_dir, search_files, write_file,
-- edit_file, run_command) never reach outside [tools] workspace in luft.toml, and
-- run_command only runs what [tools] allow_commands lists. write_file and edit_file are
-- destructive: under the default [tools] approval = "ask" each write waits for a yes
-- (this script uses only the read tools). MCP servers configured under
-- [mcp_servers.NAME] add their tools as NAME__tool.
--
-- session_id continues a conversation: the second agent sees the first one's exchange.
--
--   luft run --workflow examples/tools-demo.lua --args '{"dir": "."}'
--
-- On the offline mock backend tools are not called (the mock answers at once), so the
-- script runs anywhere; with a real model configured it reads the workspace.

meta = {
  reasoning = "One agent surveys the workspace with read-only tools; a follow-up in the same session asks for the next step.",
  phases = {
    { label = "survey", description = "list and read files to describe the project" },
    { label = "follow-up", description = "continue the same conversation" },
  },
}

function main()
  local dir = args.dir or "."

  phase("survey")
  local survey = agent{
    name = "surveyor",
    system = "You describe software projects briefly and accurately.",
    prompt = "Look at the files under " .. dir .. " and describe in three sentences what this project is.",
    tools = { "list_dir", "read_file", "search_files" }, -- read-only: nothing to approve
    max_tokens = 400,
  }
  if not survey.ok then error("the survey failed: " .. survey.error) end

  phase("follow-up")
  -- The same session: the agent sees its earlier question and answer.
  local next_step = agent{
    name = "planner",
    prompt = "Given that, what is the single most useful next change? One sentence.",
    session_id = survey.session_id,
  }
  if not next_step.ok then error("the follow-up failed: " .. next_step.error) end

  report({
    markdown = "## What this is\n\n" .. survey.text .. "\n\n## Next step\n\n" .. next_step.text .. "\n",
  })
end
