package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/arbor-dev/arbor/api"
)

// httpToken returns the HTTP face's bearer token kept in home
// (api.HTTPTokenFile), making one at the first start: 32 random bytes in
// hex, in a file of mode 0600 created exclusively, and logged once, here.
// A token file that others may read is refused rather than used.
func httpToken(home string, log *slog.Logger) (string, error) {
	path := filepath.Join(home, api.HTTPTokenFile)
	for range 2 {
		tok, err := readToken(path)
		if err == nil {
			return tok, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		b := make([]byte, 32)
		rand.Read(b) // never fails (crypto/rand)
		tok = hex.EncodeToString(b)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue // made meanwhile: read that one
		}
		if err != nil {
			return "", fmt.Errorf("daemon: HTTP token: %w", err)
		}
		_, werr := f.WriteString(tok + "\n")
		serr := f.Sync()
		if cerr := f.Close(); werr == nil && serr == nil {
			werr = cerr
		} else if werr == nil {
			werr = serr
		}
		if werr != nil {
			os.Remove(path)
			return "", fmt.Errorf("daemon: HTTP token: %w", werr)
		}
		log.Info("generated the HTTP bearer token (shown once; clients read it from the file)", "file", path, "token", tok)
		return tok, nil
	}
	return "", fmt.Errorf("daemon: HTTP token %s keeps changing", path)
}

func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return "", api.Errorf(api.ErrBadRequest, "daemon: HTTP token file %s has mode %v; it must be a regular file only its owner can read (chmod 600)", path, fi.Mode())
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if tok == "" || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", api.Errorf(api.ErrBadRequest, "daemon: HTTP token file %s holds no valid token", path)
	}
	return tok, nil
}
