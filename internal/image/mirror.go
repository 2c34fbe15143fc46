package image

import (
	"bufio"
	"os"
	"slices"
	"strings"
)

// Mirror is the Debian mirror apt is configured with in sources (one-line
// .list files and deb822 .sources files): the URI of the first "deb"
// source that serves suite, else of the first that serves a Debian suite
// at all (not -security or -updates, which are other archives), else
// DefaultMirror.
func Mirror(sources []string, suite string) string {
	var any string
	for _, path := range sources {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		var entries []aptSource
		if strings.HasSuffix(path, ".sources") {
			entries = parseDeb822(f)
		} else {
			entries = parseOneLine(f)
		}
		f.Close()
		for _, e := range entries {
			if !strings.HasPrefix(e.uri, "http://") && !strings.HasPrefix(e.uri, "https://") {
				continue
			}
			if slices.Contains(e.suites, suite) {
				return strings.TrimSuffix(e.uri, "/")
			}
			if any == "" && slices.ContainsFunc(e.suites, func(s string) bool { return !strings.Contains(s, "-") && !strings.Contains(s, "/") }) &&
				strings.Contains(e.uri, "debian") && !strings.Contains(e.uri, "security") {
				any = strings.TrimSuffix(e.uri, "/")
			}
		}
	}
	if any != "" {
		return any
	}
	return DefaultMirror
}

type aptSource struct {
	uri    string
	suites []string
}

// parseOneLine reads "deb [options] URI SUITE COMPONENTS..." lines.
func parseOneLine(f *os.File) []aptSource {
	var out []aptSource
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") {
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) == 0 {
				continue
			}
			fields = fields[1:]
		}
		if len(fields) < 2 {
			continue
		}
		out = append(out, aptSource{uri: fields[0], suites: []string{fields[1]}})
	}
	return out
}

// parseDeb822 reads stanzas of Types, URIs and Suites.
func parseDeb822(f *os.File) []aptSource {
	var out []aptSource
	stanza := map[string]string{}
	flush := func() {
		if slices.Contains(strings.Fields(stanza["types"]), "deb") && !strings.EqualFold(strings.TrimSpace(stanza["enabled"]), "no") {
			for _, u := range strings.Fields(stanza["uris"]) {
				out = append(out, aptSource{uri: u, suites: strings.Fields(stanza["suites"])})
			}
		}
		stanza = map[string]string{}
	}
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t"):
			if last != "" {
				stanza[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if ok {
				last = strings.ToLower(strings.TrimSpace(k))
				stanza[last] = strings.TrimSpace(v)
			}
		}
	}
	flush()
	return out
}
