//! Token ids from an endpoint that does not return them (llama.cpp's OpenAI-compatible servers):
//! the prompt is rendered with the model's chat template (ChatML) and tokenized by the server's
//! own `/extras/tokenize`, and accepted only when its length is exactly the prompt token count
//! the server reported for the call; the completion's ids are its sampled pieces (the logprobs'
//! tokens), each tokenized alone and accepted only when each is exactly one id. Anything else
//! leaves the call without ids (it is then not token-faithful, and no segment is made of it).
//! The sampled end-of-turn token is not among the pieces llama.cpp reports: it comes back as part
//! of the next prompt (an observation, loss mask 0).

use serde_json::{Value, json};

use crate::Completion;

/// The ChatML rendering of a request's messages, with the assistant turn opened.
pub fn chatml(body: &Value) -> String {
    let mut out = String::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        let content = match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            _ => String::new(),
        };
        out.push_str(&format!("<|im_start|>{}\n{content}<|im_end|>\n", m["role"].as_str().unwrap_or("user")));
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

async fn tokenize(http: &reqwest::Client, url: &str, text: &str) -> Option<Vec<u32>> {
    let response = http.post(url).json(&json!({"input": text})).send().await.ok()?;
    let v: Value = response.json().await.ok()?;
    v["tokens"].as_array()?.iter().map(|t| t.as_u64().map(|t| t as u32)).collect()
}

/// Fills `completion`'s prompt and completion ids from the tokenizer at `url` where they can be
/// had exactly; returns why not otherwise.
pub async fn fill(http: &reqwest::Client, url: &str, body: &Value, completion: &mut Completion) -> Result<(), String> {
    let pieces: Vec<String> = completion
        .logprobs
        .as_ref()
        .and_then(|l| l["content"].as_array())
        .ok_or("the endpoint returned no logprobs")?
        .iter()
        .map(|t| t["token"].as_str().map(str::to_string))
        .collect::<Option<_>>()
        .ok_or("a logprob without its token")?;
    let prompt = tokenize(http, url, &chatml(body)).await.ok_or("the tokenizer did not answer")?;
    if prompt.len() != completion.usage.prompt_tokens as usize {
        return Err(format!(
            "the ChatML prompt is {} tokens, the endpoint counted {}: not its template",
            prompt.len(),
            completion.usage.prompt_tokens
        ));
    }
    let mut ids = Vec::with_capacity(pieces.len());
    for piece in &pieces {
        match tokenize(http, url, piece).await.as_deref() {
            Some([id]) => ids.push(*id),
            other => return Err(format!("the sampled piece {piece:?} tokenizes to {other:?}, not one id")),
        }
    }
    completion.prompt_token_ids = Some(prompt);
    completion.token_ids = Some(ids);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders_roles_and_opens_the_reply() {
        let body = json!({"messages": [{"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]});
        assert_eq!(
            chatml(&body),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n"
        );
    }
}
