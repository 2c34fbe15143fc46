package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/daemon"
)

// daemonFile is the daemon's configuration file (HOME/arbord.toml). Every
// key is optional; the flags of arbor daemon override it. An unknown key is
// an error, so a typo never passes for a setting.
type daemonFile struct {
	Socket      string `toml:"socket"`
	AllowUIDs   []int  `toml:"allow_uids"`
	HTTP        string `toml:"http"`
	Passthrough *bool  `toml:"passthrough"`
	// FUSETransport: dev (default), auto or uring (cowfs.Transport*).
	FUSETransport string `toml:"fuse_transport"`
	LogLevel      string `toml:"log_level"`
	// The socket's limits (see lineapi.Config); zero: derived from the
	// descriptor limit, and a 2 min idle timeout.
	MaxConns       int    `toml:"max_conns"`
	MaxConnsPerUID int    `toml:"max_conns_per_uid"`
	IdleTimeout    string `toml:"idle_timeout"` // a Go duration, e.g. "5m"
}

// readDaemonFile reads the file at path. A missing file is no error unless
// it was named explicitly (--config).
func readDaemonFile(path string, explicit bool) (daemonFile, error) {
	var fc daemonFile
	md, err := toml.DecodeFile(path, &fc)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return daemonFile{}, nil
	}
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return daemonFile{}, fmt.Errorf("%w: configuration file %s: %s", api.ErrBadRequest, path, pe.ErrorWithPosition())
		}
		return daemonFile{}, fmt.Errorf("%w: configuration file %s: %w", api.ErrBadRequest, path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return daemonFile{}, api.Errorf(api.ErrBadRequest, "configuration file %s: unknown key %s (known: socket, allow_uids, http, passthrough, log_level, max_conns, max_conns_per_uid, idle_timeout)",
			path, strings.Join(keys, ", "))
	}
	return fc, nil
}

// daemonSettings is a daemon.Config and the log level to build its logger with.
type daemonSettings struct {
	daemon.Config
	logLevel slog.Level
}

// config turns the merged settings into the daemon's Config.
func (fc daemonFile) config(home string) (daemonSettings, error) {
	s := daemonSettings{Config: daemon.Config{Home: home, Socket: fc.Socket, HTTPAddr: fc.HTTP, Passthrough: fc.Passthrough, FUSETransport: fc.FUSETransport}}
	if err := cowfs.CheckTransport(fc.FUSETransport); err != nil {
		return s, fmt.Errorf("fuse_transport: %w", err)
	}
	for _, u := range fc.AllowUIDs {
		if u < 0 {
			return s, api.Errorf(api.ErrBadRequest, "allow_uids: %d is not a uid", u)
		}
	}
	s.AllowUIDs = fc.AllowUIDs
	if fc.MaxConns < 0 || fc.MaxConnsPerUID < 0 {
		return s, api.Errorf(api.ErrBadRequest, "max_conns %d, max_conns_per_uid %d: want 0 (the default) or more", fc.MaxConns, fc.MaxConnsPerUID)
	}
	s.MaxConns, s.MaxConnsPerUID = fc.MaxConns, fc.MaxConnsPerUID
	if fc.IdleTimeout != "" {
		d, err := time.ParseDuration(fc.IdleTimeout)
		if err != nil || d <= 0 {
			return s, api.Errorf(api.ErrBadRequest, "idle_timeout %q: want a positive duration such as 5m", fc.IdleTimeout)
		}
		s.IdleTimeout = d
	}
	switch fc.LogLevel {
	case "", "info":
		s.logLevel = slog.LevelInfo
	case "debug":
		s.logLevel = slog.LevelDebug
	case "warn":
		s.logLevel = slog.LevelWarn
	case "error":
		s.logLevel = slog.LevelError
	default:
		return s, api.Errorf(api.ErrBadRequest, "log_level %q: want debug, info, warn or error", fc.LogLevel)
	}
	return s, nil
}
