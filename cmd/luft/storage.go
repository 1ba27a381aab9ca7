package main

import (
	"github.com/luft-run/luft/config"
)

// storageEnv names the store instead of [storage] url (env beats config).
const storageEnv = "LUFT_STORAGE_URL"

// storageURL is where runs are kept (SPEC §9): LUFT_STORAGE_URL, else [storage] url of the
// config file, else "" (SQLite in the state dir). A config that does not load is an error
// here too: it may be what names the database the runs are in.
func storageURL(e *env, g *globalFlags) (string, error) {
	if u := e.getenv(storageEnv); u != "" {
		if err := config.CheckStorageURL(u); err != nil {
			return "", usageErr("invalid %s: %v", storageEnv, err)
		}
		return u, nil
	}
	cfg, err := config.Load(g.configPath, e.getenv, e.getenv("HOME"))
	if err != nil {
		return "", usageErr("invalid config: %v", err)
	}
	return cfg.Storage.URL, nil
}
