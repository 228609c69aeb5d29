package mvproxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeStatus answers with a metav1.Status, as kube-apiserver does for its errors, so
// that clients print the message.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string, retryAfter int) {
	s := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code), //nolint:gosec // an HTTP status code fits
	}
	if retryAfter > 0 {
		s.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfter)} //nolint:gosec // seconds, small
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	body, _ := json.Marshal(s)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
