package allocator

// RouteTimeout lets the external tests shorten the shared port's routing
// deadline.
var RouteTimeout = &routeTimeout
