//! API tokens and the caller a request acts as.
//!
//! A token is `pbx_` followed by 43 base64url characters (32 random bytes
//! from the operating system). Only its SHA-256 is stored, so a copy of the
//! data file does not hand out working tokens. A tenant token acts for its
//! tenant only; an admin token acts for the operator and belongs to no
//! tenant; a consumer token reaches only one pull subscription's endpoints
//! (`/v1/subscriptions/<name>/...`), for every tenant.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use postbox_item::{AttributeValue, Item};
use postbox_queue::QueueClient;
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
    /// The pull subscription a consumer token serves (its only endpoints).
    pub consumer: Option<String>,
}

impl Caller {
    /// Whether this is an admin token.
    pub fn is_admin(&self) -> bool {
        self.tenant.is_none() && self.consumer.is_none()
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
    /// Tokens found, by their hash, with the table's change count they
    /// were read at (`ItemStore::change_count`): kept until the table
    /// changes, so a revocation still refuses at the next request.
    found: Mutex<HashMap<String, (u64, TokenInfo)>>,
}

/// Tokens kept in [`Tokens`]' memory at most (it starts over when full).
const KEPT_TOKENS: usize = 4096;

/// The SHA-256 of a token, hex: the key it is stored under.
pub fn token_hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    hex::encode(digest)
}

/// A tenant name the API accepts: 1-64 of `[A-Za-z0-9_.-]`.
pub fn check_tenant(tenant: &str) -> Result<(), ApiError> {
    if postbox_server::auth::is_tenant_name(tenant) {
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
            found: Mutex::new(HashMap::new()),
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
        self.create_expiring(tenant, subject, None).await
    }

    /// [`Tokens::create`], valid until `expires_at_ms` (ms since the epoch)
    /// if given.
    pub async fn create_expiring(
        &self,
        tenant: Option<&str>,
        subject: &str,
        expires_at_ms: Option<u64>,
    ) -> Result<String, ApiError> {
        let scope = match tenant {
            Some(t) => Scope::Tenant(t),
            None => Scope::Admin,
        };
        self.create_scoped(scope, subject, expires_at_ms).await
    }

    /// A token of `scope` held by `subject`, valid until `expires_at_ms`
    /// if given; shown this once.
    pub async fn create_scoped(
        &self,
        scope: Scope<'_>,
        subject: &str,
        expires_at_ms: Option<u64>,
    ) -> Result<String, ApiError> {
        if let Scope::Tenant(t) = scope {
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
        if let Some(at) = expires_at_ms {
            item.insert("expires_at_ms".into(), AttributeValue::n(at as i64));
        }
        match scope {
            Scope::Tenant(t) => item.insert("tenant".into(), AttributeValue::s(t)),
            Scope::Admin => item.insert("admin".into(), AttributeValue::Bool(true)),
            Scope::Consumer(sub) => item.insert("consumer".into(), AttributeValue::s(sub)),
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

    /// The caller a presented token acts as, or None if it is not a token
    /// (or no longer one: revoked or expired).
    pub async fn authenticate(&self, token: &str) -> Result<Option<Caller>, StoreError> {
        Ok(match self.check(token).await? {
            Presented::Valid(c) => Some(c),
            Presented::Unknown | Presented::Expired(_) => None,
        })
    }

    /// What a presented token is now, so a revocation or an expiry takes
    /// effect at the next request. A token found is read from the store
    /// again once the tokens table has changed (on a store that cannot say
    /// when, at every request).
    pub async fn check(&self, token: &str) -> Result<Presented, StoreError> {
        if !token.starts_with("pbx_") || token.len() > 100 {
            return Ok(Presented::Unknown);
        }
        let hash = token_hash(token);
        // Read before the row: a change committed after this number is
        // read makes the number differ at the next request.
        let changes = self.store.change_count(&self.table);
        let kept = changes.and_then(|n| {
            let found = self.found.lock().expect("tokens kept");
            found
                .get(&hash)
                .filter(|(at, _)| *at == n)
                .map(|(_, info)| info.clone())
        });
        let info = match kept {
            Some(info) => info,
            None => match self.read(&hash).await? {
                Some(info) => {
                    if let Some(n) = changes {
                        let mut found = self.found.lock().expect("tokens kept");
                        if found.len() >= KEPT_TOKENS {
                            found.clear();
                        }
                        found.insert(hash, (n, info.clone()));
                    }
                    info
                }
                None => return Ok(Presented::Unknown),
            },
        };
        if let Some(at) = info.expires_at_ms
            && at <= postbox_engine::envelope::now_ms()
        {
            return Ok(Presented::Expired(
                postbox_engine::envelope::format_timestamp(at),
            ));
        }
        Ok(Presented::Valid(Caller {
            tenant: info.tenant,
            subject: info.subject,
            consumer: info.consumer,
        }))
    }

    /// The row of the token whose hash is `hash`.
    async fn read(&self, hash: &str) -> Result<Option<TokenInfo>, StoreError> {
        let mut key = Item::new();
        key.insert("pk".into(), AttributeValue::s(format!("TOKEN#{hash}")));
        // The last commit, synced or not: a token whose row is not synced
        // yet has not been handed out (its creator is answered after the
        // sync), and a revocation refuses as soon as it commits. So a
        // request never waits for another request's sync here.
        let out = self
            .store
            .get_item_committed(GetItemInput {
                table_name: self.table.clone(),
                key,
                consistent_read: Some(true),
                ..Default::default()
            })
            .await?;
        Ok(out.item.as_ref().map(TokenInfo::of))
    }

    /// Every token's row (never the token itself).
    pub async fn list(&self) -> Result<Vec<TokenInfo>, StoreError> {
        Ok(self.rows().await?.iter().map(TokenInfo::of).collect())
    }

    /// Every row of the token table, page by page.
    async fn rows(&self) -> Result<Vec<Item>, StoreError> {
        self.store
            .scan_all(postbox_store::api::ScanInput {
                table_name: self.table.clone(),
                ..Default::default()
            })
            .await
    }

    /// The token whose id is `id` (its row's key and what is known of it).
    async fn find(&self, id: &str) -> Result<Option<(Item, TokenInfo)>, StoreError> {
        Ok(self.rows().await?.into_iter().find_map(|item| {
            let info = TokenInfo::of(&item);
            (info.id == id).then(|| {
                let key = Item::from([(
                    "pk".to_owned(),
                    item.get("pk").cloned().unwrap_or(AttributeValue::Null),
                )]);
                (key, info)
            })
        }))
    }

    /// Deletes token `id`; what it was, if it existed. The next request
    /// with it is refused.
    pub async fn revoke(&self, id: &str) -> Result<Option<TokenInfo>, StoreError> {
        let Some((key, info)) = self.find(id).await? else {
            return Ok(None);
        };
        Ok(self.delete(key).await?.then_some(info))
    }

    /// Deletes the token row at `key`; whether it was still there.
    async fn delete(&self, key: Item) -> Result<bool, StoreError> {
        match self
            .store
            .delete_item(postbox_store::api::DeleteItemInput {
                table_name: self.table.clone(),
                key,
                condition_expression: Some("attribute_exists(pk)".into()),
                ..Default::default()
            })
            .await
        {
            Ok(_) => Ok(true),
            // Revoked meanwhile by another request.
            Err(StoreError::ConditionalCheckFailed { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// What a token may act as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The operator.
    Admin,
    /// One tenant.
    Tenant(&'a str),
    /// One pull subscription's consumers, for every tenant.
    Consumer(&'a str),
}

/// A presented token, as [`Tokens::check`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presented {
    /// A token that acts as this caller.
    Valid(Caller),
    /// Not a token Postbox issued, or one since revoked.
    Unknown,
    /// A token that expired at this time.
    Expired(String),
}

/// What is kept of a token: everything but the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    /// The public id (`postbox token revoke ID`): the first 16 hex digits
    /// of the token's SHA-256, read from the row's key.
    pub id: String,
    pub tenant: Option<String>,
    /// The pull subscription of a consumer token.
    pub consumer: Option<String>,
    pub subject: String,
    pub created_at: Option<String>,
    pub expires_at_ms: Option<u64>,
}

impl TokenInfo {
    /// Whether the token is an operator's.
    pub fn is_admin(&self) -> bool {
        self.tenant.is_none() && self.consumer.is_none()
    }

    fn scope(&self) -> Scope<'_> {
        match (&self.tenant, &self.consumer) {
            (Some(t), _) => Scope::Tenant(t),
            (None, Some(c)) => Scope::Consumer(c),
            (None, None) => Scope::Admin,
        }
    }

    fn of(item: &Item) -> TokenInfo {
        let s = |name: &str| match item.get(name) {
            Some(AttributeValue::S(v)) => Some(v.clone()),
            _ => None,
        };
        let id = s("pk")
            .and_then(|pk| {
                pk.strip_prefix("TOKEN#")
                    .map(|h| h[..16.min(h.len())].to_owned())
            })
            .unwrap_or_default();
        TokenInfo {
            id,
            tenant: s("tenant"),
            consumer: s("consumer"),
            subject: s("subject").unwrap_or_default(),
            created_at: s("created_at"),
            expires_at_ms: item
                .get("expires_at_ms")
                .and_then(AttributeValue::as_n)
                .and_then(|n| u64::try_from(n.to_i64()?).ok()),
        }
    }

    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "kind": "token",
            "tenant": self.tenant,
            "consumer": self.consumer,
            "admin": self.is_admin(),
            "subject": self.subject,
            "created_at": self.created_at,
            "expires_at": self.expires_at_ms.map(postbox_engine::envelope::format_timestamp),
        })
    }
}

/// The public id of `token`: the first 16 hex digits of its SHA-256.
pub fn token_id(token: &str) -> String {
    token_hash(token)[..16].to_owned()
}

impl<S: ItemStore, Q: QueueClient> FromRequestParts<Api<S, Q>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Api<S, Q>) -> Result<Caller, ApiError> {
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
        match api.inner.tokens.check(token).await? {
            Presented::Valid(caller) => {
                // A consumer token reaches its subscription's endpoints and
                // nothing else, whatever a handler does with the caller.
                if let Some(sub) = &caller.consumer
                    && !parts
                        .uri
                        .path()
                        .strip_prefix("/v1/subscriptions/")
                        .and_then(|rest| rest.strip_prefix(sub.as_str()))
                        .is_some_and(|rest| rest.starts_with('/'))
                {
                    return Err(ApiError::forbidden(format!(
                        "a consumer token reaches only /v1/subscriptions/{sub}/..."
                    )));
                }
                Ok(caller)
            }
            Presented::Unknown => Err(ApiError::unauthorized("the token is not valid")),
            Presented::Expired(at) => {
                Err(ApiError::unauthorized(format!("the token expired at {at}")))
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateToken {
    tenant: Option<String>,
    subject: Option<String>,
    #[serde(default)]
    admin: bool,
    /// A consumer token of this pull subscription.
    consumer: Option<String>,
    /// An access key for the AWS wire protocols instead of an API token.
    #[serde(default)]
    aws: bool,
    /// Seconds the token is valid for (1 to ten years; default: until revoked).
    expires_in: Option<u64>,
}

/// Longest `expires_in`: ten years.
const MAX_EXPIRES_IN: u64 = 10 * 365 * 86_400;

fn expiry(expires_in: Option<u64>) -> Result<Option<u64>, ApiError> {
    match expires_in {
        None => Ok(None),
        Some(s) if (1..=MAX_EXPIRES_IN).contains(&s) => {
            Ok(Some(postbox_engine::envelope::now_ms() + s * 1000))
        }
        Some(_) => Err(ApiError::bad_request(
            "invalid_request",
            format!("expires_in must be 1 to {MAX_EXPIRES_IN} seconds"),
        )),
    }
}

/// `POST /v1/tokens` (admin): `{"tenant": "acme", "subject": "billing"}` or
/// `{"admin": true, "subject": "ops"}`; answers the token, once. With
/// `"aws": true`, an access key for the wire protocols instead (an admin
/// one, or one scoped to `"tenant"`): `{"access_key_id",
/// "secret_access_key"}`, once.
pub(crate) async fn create_token<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require_admin()?;
    let req: CreateToken = crate::body::parse_json(&body)?;
    if let Some(sub) = &req.consumer {
        if req.tenant.is_some() || req.admin || req.aws {
            return Err(ApiError::bad_request(
                "invalid_request",
                "a consumer token serves one subscription for every tenant: give \"consumer\" alone (not with tenant, admin or aws)",
            ));
        }
        let found = crate::ops::subscription(api.inner.engine.catalog(), sub)?;
        if found.handler != postbox_worker::pull::PULL_HANDLER {
            return Err(ApiError::bad_request(
                "not_pull",
                format!(
                    "subscription {sub:?} is not a pull subscription (its handler is {:?})",
                    found.handler
                ),
            ));
        }
        let subject = req.subject.unwrap_or_else(|| format!("consumer:{sub}"));
        let expires_at_ms = expiry(req.expires_in)?;
        let token = api
            .inner
            .tokens
            .create_scoped(Scope::Consumer(sub), &subject, expires_at_ms)
            .await?;
        return Ok((
            StatusCode::CREATED,
            Json(json!({
                "token": token,
                "id": token_id(&token),
                "consumer": sub,
                "subject": subject,
                "admin": false,
                "expires_at": expires_at_ms.map(postbox_engine::envelope::format_timestamp),
            })),
        ));
    }
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
                "give \"tenant\" for a tenant token, \"admin\": true for an admin token, or \"consumer\" for a pull subscription's consumers",
            ));
        }
        (t, _) => t,
    };
    let expires_at_ms = expiry(req.expires_in)?;
    if req.aws {
        if req.expires_in.is_some() {
            return Err(ApiError::bad_request(
                "invalid_request",
                "access keys do not expire; revoke them with DELETE /v1/tokens/{id}",
            ));
        }
        if let Some(t) = tenant {
            check_tenant(t)?;
        }
        let key = postbox_server::create_access_key(api.inner.store.as_ref(), tenant)
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))?;
        tracing::info!(key = %key.id, ?tenant, subject = ?req.subject, "access key created");
        return Ok((
            StatusCode::CREATED,
            Json(json!({
                "access_key_id": key.id,
                "secret_access_key": key.secret,
                "admin": tenant.is_none(),
                "tenant": tenant,
            })),
        ));
    }
    let subject = req.subject.unwrap_or_else(|| match tenant {
        Some(t) => format!("token:{t}"),
        None => "admin".into(),
    });
    let token = api
        .inner
        .tokens
        .create_expiring(tenant, &subject, expires_at_ms)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "token": token,
            "id": token_id(&token),
            "tenant": tenant,
            "subject": subject,
            "admin": tenant.is_none(),
            "expires_at": expires_at_ms.map(postbox_engine::envelope::format_timestamp),
        })),
    ))
}

/// `GET /v1/tokens` (admin): every API token and wire access key, by id,
/// without secrets.
pub(crate) async fn list_tokens<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let mut out: Vec<Value> = api
        .inner
        .tokens
        .list()
        .await?
        .iter()
        .map(TokenInfo::json)
        .collect();
    for key in postbox_server::list_access_keys(api.inner.store.as_ref()).await? {
        out.push(json!({
            "id": key.id,
            "kind": "access_key",
            "tenant": key.tenant,
            "admin": key.admin,
            // Stored in SigV4's date form; listed like the tokens' times.
            "created_at": key.created_at.as_deref().map(|t| {
                postbox_server::auth::parse_amz_date(t).map_or(t.to_owned(), |s| {
                    postbox_engine::envelope::format_timestamp(s * 1000)
                })
            }),
            "expires_at": null,
        }));
    }
    Ok(Json(json!({"tokens": out})))
}

/// `DELETE /v1/tokens/{id}` (admin): revokes an API token or a wire access
/// key; the next request with it is refused.
pub(crate) async fn revoke_token<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    if id.starts_with("AKIA") {
        if postbox_server::revoke_access_key(api.inner.store.as_ref(), &id).await? {
            return Ok(Json(json!({"revoked": id, "kind": "access_key"})));
        }
    } else if let Some(info) = api.inner.tokens.revoke(&id).await? {
        tracing::info!(id = %info.id, tenant = ?info.tenant, "token revoked");
        return Ok(Json(json!({"revoked": id, "kind": "token"})));
    }
    Err(ApiError::not_found(format!(
        "no token or access key {id:?}"
    )))
}

/// `POST /v1/tokens/{id}/rotate` (admin): a new API token for the same
/// tenant and subject (and, with `{"expires_in": N}`, a new expiry; else the
/// old one's), shown once; the old token is revoked.
pub(crate) async fn rotate_token<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require_admin()?;
    #[derive(Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct Rotate {
        expires_in: Option<u64>,
    }
    let req: Rotate = if body.is_empty() {
        Rotate::default()
    } else {
        crate::body::parse_json(&body)?
    };
    let expires_at_ms = expiry(req.expires_in)?;
    let Some((old_key, old)) = api.inner.tokens.find(&id).await? else {
        return Err(ApiError::not_found(format!(
            "no token {id:?} (access keys are rotated by creating a new one and revoking the old)"
        )));
    };
    let expires_at_ms = expires_at_ms.or(old.expires_at_ms);
    let token = api
        .inner
        .tokens
        .create_scoped(old.scope(), &old.subject, expires_at_ms)
        .await?;
    api.inner.tokens.delete(old_key).await?;
    tracing::info!(old = %id, new = %token_id(&token), "token rotated");
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "token": token,
            "id": token_id(&token),
            "replaces": id,
            "tenant": old.tenant,
            "consumer": old.consumer,
            "subject": old.subject,
            "admin": old.is_admin(),
            "expires_at": expires_at_ms.map(postbox_engine::envelope::format_timestamp),
        })),
    ))
}

/// Middleware of [`Api::tenant_scoped`](crate::Api::tenant_scoped).
pub(crate) async fn scope_to_tenant<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
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
