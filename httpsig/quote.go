package httpsig

import (
	"fmt"
	"strconv"
)

// MaxQuotedBytes bounds what an error message quotes of a value a client chose (a
// signature label, a covered component, a keyid, a certificate's subject): a refusal
// names the value, it never echoes it at whatever length the client sent, since servers
// log refusals and send them back.
const MaxQuotedBytes = 128

// Quote is s quoted as %q does, cut to MaxQuotedBytes with its full length said when
// longer. Use it for client-chosen values in errors a server logs or answers with.
func Quote(s string) string {
	if len(s) <= MaxQuotedBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:MaxQuotedBytes]), len(s))
}
