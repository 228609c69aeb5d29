package sigv4

import (
	"errors"
	"regexp"
)

// awsSecret matches a secret AWS value with its name, as JSON ("SecretAccessKey":"…"),
// as an ini or environment entry (aws_session_token = …) or as Go's %+v (SessionToken:…).
// Errors from aws-sdk-go-v2 quote such text: a credential_process whose output does not
// parse has the whole output in its error.
var awsSecret = regexp.MustCompile(`(?i)("?(?:aws_)?(?:secret_?access_?key|session_?token)"?\s*[:=]\s*)("[^"]*"|[^\s,}"]+)`)

// RedactError returns err with the values of AWS secret keys and session tokens in its
// message replaced, so that it can be printed and logged. A nil err stays nil.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(awsSecret.ReplaceAllString(err.Error(), `${1}<redacted>`))
}
