package allocator

// RouteTimeout lets the external tests shorten the shared port's routing
// deadline.
var RouteTimeout = &routeTimeout

// KeyWaiters is how many requests with an idempotency key have waited for
// the first request with their key to settle.
func KeyWaiters(s *Service) int64 { return s.keys.waits.Load() }
