//! Warnings a peer can repeat at will are logged through the project's one throttle
//! ([`commwatch_model::throttle::LogThrottle`]): at most once per interval per kind, with the number held back.

pub use commwatch_model::throttle::LogThrottle;
