//! Integration tests of the alert component against local HTTP receivers that
//! check exact payloads and signatures; time is a manual clock.

mod delivery;
mod durability;
mod estate;
mod incidents;
mod ratelimit;
mod support;
mod updates;
mod watch;
