//! Who is looking at a page: the signed-in `User` (name, role, CSRF token, scope)
//! and the request's `Ctx` (user, language, path). Built by `session` (the
//! extractor and the sign-in), read by every page and the page shell.

use madeira_server::Role;

use crate::i18n::{Lang, t};

/// Who is looking, and what they may do.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub role: Role,
    pub csrf: String,
    /// The token's flow-label scope (`None`: every flow), as in the API.
    pub scope: Option<std::collections::BTreeMap<String, String>>,
}

impl User {
    /// The same caller the API would see for this user's token.
    pub fn caller(&self) -> madeira_server::Caller {
        madeira_server::Caller { name: self.name.clone(), role: self.role, scope: self.scope.clone() }
    }
}

/// The signed-in viewer of a page (or `local` without auth).
pub struct Ctx {
    pub user: User,
    pub lang: Lang,
    /// Path and query of this request (for sign-in's `next` and language links).
    pub path: String,
    pub auth_on: bool,
    /// The newest live event id when the request arrived: what the page shows is
    /// at least this recent, and its stream resumes after it.
    pub after: u64,
}

impl Ctx {
    pub fn can(&self, need: Role) -> bool {
        self.user.role >= need
    }

    /// Why an action is not offered, or `None` when it is.
    pub fn denied(&self, need: Role) -> Option<String> {
        (!self.can(need)).then(|| {
            format!(
                "{} {} {:?}; {} {:?}",
                t(self.lang, "Your token"),
                self.user.name,
                self.user.role,
                t(self.lang, "this needs"),
                need
            )
        })
    }
}
