//! API tokens and the caller a request acts as.
//!
//! A token is `pbx_` followed by 43 base64url characters (32 random bytes
//! from the operating system). Only its SHA-256 is stored, so a copy of the
//! data file does not hand out working tokens. A tenant token acts for its
//! tenant only; an admin token acts for the operator and belongs to no
//! tenant.

use std::sync::Arc;

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use postbox_item::{AttributeValue, Item};
use postbox_store::api::{CreateTableInput, GetItemInput, PutItemInput};
use postbox_store::{ItemStore, StoreError};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{Api, ApiError};

/// Who a request acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The tenant a tenant token belongs to; None for an admin token.
    pub tenant: Option<String>,
    /// Who holds the token; recorded as the actor of events it emits.
    pub subject: String,
}

impl Caller {
    /// Whether this is an admin token.
    pub fn is_admin(&self) -> bool {
        self.tenant.is_none()
    }

    /// The caller's tenant, or 403 for an admin token on a tenant endpoint.
    pub fn tenant(&self) -> Result<&str, ApiError> {
        self.tenant.as_deref().ok_or_else(|| {
            ApiError::forbidden(
                "this endpoint acts for one tenant; use a tenant token (postbox token create --tenant T)",
            )
        })
    }

    /// Ok for an admin token, 403 otherwise.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "this endpoint is for operators; use an admin token",
            ))
        }
    }
}

/// The token table.
pub struct Tokens<S> {
    store: Arc<S>,
    table: String,
}

/// The SHA-256 of a token, hex: the key it is stored under.
pub fn token_hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A tenant name the API accepts: 1-64 of `[A-Za-z0-9_.-]`.
pub fn check_tenant(tenant: &str) -> Result<(), ApiError> {
    let ok = !tenant.is_empty()
        && tenant.len() <= 64
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_tenant",
            format!(
                "tenant {tenant:?} must be 1 to 64 characters of letters, digits, '_', '-' and '.'"
            ),
        ))
    }
}

impl<S: ItemStore> Tokens<S> {
    /// The tokens stored in `table` of `store`.
    pub fn new(store: Arc<S>, table: impl Into<String>) -> Tokens<S> {
        Tokens {
            store,
            table: table.into(),
        }
    }

    /// Creates the table if it is missing.
    pub async fn ensure_table(&self) -> Result<(), StoreError> {
        let input = CreateTableInput::keyed_by(self.table.clone(), "pk");
        match self.store.create_table(input).await {
            Ok(_) | Err(StoreError::ResourceInUse(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates a token for `tenant` (None: an admin token) held by
    /// `subject`, and returns it. It is shown this once; only its hash is kept.
    pub async fn create(&self, tenant: Option<&str>, subject: &str) -> Result<String, ApiError> {
        if let Some(t) = tenant {
            check_tenant(t)?;
        }
        if subject.is_empty() || subject.len() > 128 {
            return Err(ApiError::bad_request(
                "invalid_subject",
                "the token's subject must be 1 to 128 characters",
            ));
        }
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "no_randomness",
                format!("the operating system gave no random bytes: {e}"),
            )
        })?;
        let token = format!("pbx_{}", URL_SAFE_NO_PAD.encode(bytes));
        let mut item = Item::new();
        item.insert(
            "pk".into(),
            AttributeValue::s(format!("TOKEN#{}", token_hash(&token))),
        );
        item.insert("subject".into(), AttributeValue::s(subject));
        match tenant {
            Some(t) => item.insert("tenant".into(), AttributeValue::s(t)),
            None => item.insert("admin".into(), AttributeValue::Bool(true)),
        };
        item.insert(
            "created_at".into(),
            AttributeValue::s(postbox_engine::envelope::format_timestamp(
                postbox_engine::envelope::now_ms(),
            )),
        );
        self.store
            .put_item(PutItemInput {
                table_name: self.table.clone(),
                item,
                condition_expression: Some("attribute_not_exists(pk)".into()),
                ..Default::default()
            })
            .await?;
        Ok(token)
    }

    /// The caller a presented token acts as, or None if it is not a token.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Caller>, StoreError> {
        if !token.starts_with("pbx_") || token.len() > 100 {
            return Ok(None);
        }
        let mut key = Item::new();
        key.insert(
            "pk".into(),
            AttributeValue::s(format!("TOKEN#{}", token_hash(token))),
        );
        let out = self
            .store
            .get_item(GetItemInput {
                table_name: self.table.clone(),
                key,
                consistent_read: Some(true),
                ..Default::default()
            })
            .await?;
        Ok(out.item.map(|item| {
            let s = |name: &str| match item.get(name) {
                Some(AttributeValue::S(v)) => Some(v.clone()),
                _ => None,
            };
            Caller {
                tenant: s("tenant"),
                subject: s("subject").unwrap_or_default(),
            }
        }))
    }
}

impl FromRequestParts<Api> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Caller, ApiError> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .ok_or_else(|| {
                ApiError::unauthorized(
                    "missing Authorization header; send 'Authorization: Bearer <token>'",
                )
            })?;
        let token = header
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header must be 'Bearer <token>'")
            })?;
        api.inner
            .tokens
            .authenticate(token)
            .await?
            .ok_or_else(|| ApiError::unauthorized("the token is not valid"))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateToken {
    tenant: Option<String>,
    subject: Option<String>,
    #[serde(default)]
    admin: bool,
    /// An access key for the AWS wire protocols instead of an API token.
    #[serde(default)]
    aws: bool,
}

/// `POST /v1/tokens` (admin): `{"tenant": "acme", "subject": "billing"}` or
/// `{"admin": true, "subject": "ops"}`; answers the token, once. With
/// `"aws": true` (admin only, for now), an access key for the wire
/// protocols instead: `{"access_key_id", "secret_access_key"}`, once.
pub(crate) async fn create_token(
    State(api): State<Api>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require_admin()?;
    let req: CreateToken = crate::events::parse_json(&body)?;
    let tenant = match (req.tenant.as_deref(), req.admin) {
        (Some(_), true) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "a token is either for a tenant or admin, not both",
            ));
        }
        (None, false) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "give \"tenant\" for a tenant token or \"admin\": true for an admin token",
            ));
        }
        (t, _) => t,
    };
    if req.aws {
        if let Some(t) = tenant {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!(
                    "tenant-scoped wire access keys are not supported yet (asked for tenant {t:?}): create an admin access key (\"admin\": true), or an API token for the tenant"
                ),
            ));
        }
        let key = postbox_server::create_access_key(api.inner.store.as_ref(), None)
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))?;
        tracing::info!(key = %key.id, subject = ?req.subject, "admin access key created");
        return Ok((
            StatusCode::CREATED,
            Json(json!({
                "access_key_id": key.id,
                "secret_access_key": key.secret,
                "admin": true,
            })),
        ));
    }
    let subject = req.subject.unwrap_or_else(|| match tenant {
        Some(t) => format!("token:{t}"),
        None => "admin".into(),
    });
    let token = api.inner.tokens.create(tenant, &subject).await?;
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"token": token, "tenant": tenant, "subject": subject, "admin": tenant.is_none()}),
        ),
    ))
}

/// Middleware of [`Api::tenant_scoped`](crate::Api::tenant_scoped).
pub(crate) async fn scope_to_tenant(
    State(api): State<Api>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (mut parts, body) = request.into_parts();
    let caller = match Caller::from_request_parts(&mut parts, &api).await {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let tenant = match caller.tenant() {
        Ok(t) => t.to_owned(),
        Err(e) => return e.into_response(),
    };
    match axum::http::HeaderValue::from_str(&tenant) {
        Ok(v) => {
            parts.headers.insert("x-tenant-id", v);
        }
        Err(_) => {
            return ApiError::forbidden("the token's tenant cannot be sent as a header")
                .into_response();
        }
    }
    next.run(axum::extract::Request::from_parts(parts, body))
        .await
}
