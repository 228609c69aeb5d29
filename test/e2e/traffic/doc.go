// Package traffic drives the Kubernetes API through one or more ways in (a proxy, or the
// apiserver directly) as clients do, and checks afterwards, against the apiserver, that
// nothing was lost or doubled. It is the workload of the end-to-end and load tests
// (test/e2e, test/load).
//
// A Load is one stream of traffic: workers doing GET, LIST, CREATE, UPDATE and DELETE at a
// steady rate on objects of one Resource in some namespaces, and long-lived watches of
// those namespaces (over HTTP/2 streams, and over WebSocket, an upgraded connection). The
// requests are plain HTTP, never retried: what each one was told is what is recorded and
// checked.
//
// What is checked (Traffic.Check):
//
//   - every write the traffic was told succeeded is there, exactly as acknowledged (same
//     resourceVersion), and each create is there once (creates use generateName, so a body
//     sent twice would make two objects);
//   - no write the traffic was told failed for certain was applied: an answer is certain
//     when it is a 4xx, or a 5xx with Retry-After (which tells clients such as client-go
//     to send the request again, so it must mean that the request was not processed);
//     transport errors and other 5xx answers leave the outcome open, and either outcome
//     is accepted;
//   - no 404 for a collection, nor for an object that exists;
//   - every watch saw every acknowledged change of its objects once (no event lost, none
//     duplicated), resuming from its last resourceVersion after an error (and relisting,
//     counted, only when the server answered 410 Gone), and ended in the state the
//     apiserver holds.
package traffic
