package execcache

import (
	"slices"
	"time"
)

// entrySchema versions the entry format; an entry of another version is a miss.
const entrySchema = 1

// maxClients bounds the clients an entry remembers. Beyond it the oldest are forgotten; a
// forgotten client whose credential is rejected is served it once more, and its next call
// is then recognised (one more failed request, never a stale credential for long).
const maxClients = 256

// entry is one cached answer. It holds the credential, so it lives in a 0600 file.
type entry struct {
	Schema     int      `json:"schema"`
	Command    string   `json:"command"` // resolved path of the wrapped plugin
	Args       []string `json:"args"`
	APIVersion string   `json:"apiVersion"`
	// Server is spec.cluster.server when the client sent the cluster; for --list only.
	Server string    `json:"server,omitempty"`
	Stored time.Time `json:"stored"`
	// Expiration is the answer's expirationTimestamp; nil when it had none.
	Expiration *time.Time `json:"expirationTimestamp,omitempty"`
	// ServeUntil is when the entry stops being served: Expiration minus the skew, or
	// Stored plus the default TTL.
	ServeUntil time.Time `json:"serveUntil"`
	// Output is the wrapped plugin's stdout, byte for byte, when the answer rests in the
	// file (--storage file).
	Output []byte `json:"output,omitempty"`
	// Keyring says where the answer rests instead, when it is in an OS keyring; Output
	// is then empty, so the file holds no credential.
	Keyring *keyringRef `json:"keyring,omitempty"`
	// Credential describes a keyring entry's answer for --list (its kind and size, never
	// its value).
	Credential string `json:"credential,omitempty"`
	// Clients are the processes this answer was given to; a second call from one of them
	// means the client refreshes the credential after a 401.
	Clients []Client `json:"clients"`
	// Failure, in an entry without Output, is the wrapped plugin's last failure: callers
	// are answered with it until Failure.Until instead of running the plugin again.
	Failure *failure `json:"failure,omitempty"`
}

// failure is a failed or cancelled run of the wrapped plugin, kept for --failure-window.
// It holds no output: only when, how, and until when.
type failure struct {
	At        time.Time `json:"at"`
	Until     time.Time `json:"until"`
	Code      int       `json:"code"` // the plugin's exit code; 1 when cancelled or killed
	Cancelled bool      `json:"cancelled,omitempty"`
	// Interactive: the run had the terminal. A failure without one does not stop a caller
	// that has one (a person in a terminal can do what the run could not).
	Interactive bool `json:"interactive,omitempty"`
}

// failing reports whether the entry holds a failure to answer with at now.
func (e *entry) failing(now time.Time) bool {
	return e.Schema == entrySchema && e.Failure != nil && now.Before(e.Failure.Until)
}

func (e *entry) servable(now time.Time) bool {
	return e.Schema == entrySchema && (len(e.Output) > 0 || e.Keyring != nil) && now.Before(e.ServeUntil)
}

func (e *entry) servedTo(c Client) bool {
	return c.Known() && slices.Contains(e.Clients, c)
}

// addClient records c and reports whether the entry changed.
func (e *entry) addClient(c Client) bool {
	if !c.Known() || e.servedTo(c) {
		return false
	}
	e.Clients = append(e.Clients, c)
	if over := len(e.Clients) - maxClients; over > 0 {
		e.Clients = slices.Delete(e.Clients, 0, over)
	}
	return true
}

// serveUntil says how long an answer may be served, and false if it must not be cached.
// A credential is served until skew before its expiry, the skew being at most half the
// lifetime it has left (so that a short-lived credential is still cached for a while); one
// without expiry for ttl, or not at all when ttl is zero.
func serveUntil(now time.Time, expiration *time.Time, skew, ttl time.Duration) (time.Time, bool) {
	if expiration == nil {
		return now.Add(ttl), ttl > 0
	}
	left := expiration.Sub(now)
	until := expiration.Add(-min(skew, left/2))
	return until, now.Before(until)
}
