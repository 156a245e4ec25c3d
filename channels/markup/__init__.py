"""The agent's Markdown rendered into each platform's markup: one walk, one dialect a platform.

`renderer.Renderer` walks markdown-it-py's syntax tree (`channels.markup.renderer`) once; each
dialect module subclasses it and says only what differs on its platform (escaping, markers,
links, quotes, code blocks):

- `slack`: Slack mrkdwn;
- `telegram`: Telegram HTML and MarkdownV2 (imports python-telegram-bot: only the Telegram
  channel imports it);
- `plain`: WhatsApp's markup, plain SMS text, and the plain-text part of a reply email;
- `html`: markdown-it-py's own HTML (Matrix `formatted_body`, the email HTML part).

Feishu cards, Discord, WeCom and QQ take the agent's Markdown as it is.
"""
