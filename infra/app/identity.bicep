// The one user-assigned managed identity the function app uses for everything: host storage,
// deployment package, Service Bus, Cosmos DB, the Durable Task Scheduler and Application
// Insights. Every role assignment of the app names this identity's principal.
param name string
param location string
param tags object

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output name string = identity.name
output principalId string = identity.properties.principalId
output clientId string = identity.properties.clientId
